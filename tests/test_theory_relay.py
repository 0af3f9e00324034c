"""The sympy derivation (nohair_jax.theory.relay): it runs, and its pieces agree with references."""

import itertools
import math
from fractions import Fraction

import sympy as sp

from nohair_jax import relay
from nohair_jax.theory import relay as theory


def test_derivation_runs_and_checks_itself(derivation_output):
    # main() is what both `python -m nohair_jax.theory.relay` and `python theory/relay.py` run.
    derivation_output(theory)


def test_recursion_offsets_agree_with_exact_library_path():
    for residual in (False, True):
        symbolic = theory.recursion_offsets(5, 4, residual)
        exact = relay.offsets_exact(3, 5, 4, residual=residual)
        for sym_row, row in zip(symbolic, exact):
            assert [Fraction(str(v.as_expr().subs(theory.P, 3))) for v in sym_row] == row


def test_residual_weights_are_binomial_tails():
    for depth in range(1, 7):
        want = [sum(math.comb(depth, j) for j in range(k + 1, depth + 1)) for k in range(depth)]
        assert theory.weights(depth, residual=True) == want
        assert theory.weights(depth) == [1] * depth


def test_newton_identities_match_complete_homogeneous_polynomials():
    # h_k of three numbers, summed over multisets, against Newton's identities on power sums.
    values = [sp.Rational(1, 4), sp.Rational(1, 5), sp.Rational(1, 6)]
    power_sums = [sum(v**i for v in values) for i in range(1, 5)]
    h = theory.newton_complete_homogeneous(power_sums)
    for k in range(5):  # k = 0: the empty multiset, h_0 = 1
        assert h[k] == sum(sp.prod(c) for c in itertools.combinations_with_replacement(values, k))


def test_local_exponent_series_leading_terms():
    c1 = theory.prompt_constant(1)
    for depth in range(1, 5):
        series = theory.local_exponent_series(depth)
        assert series.coeff(theory.w, 0) == 0
        assert series.coeff(theory.w, 1) == depth - 1
        assert sp.expand(series.coeff(theory.w, 2) + (depth - 1) * (1 + c1)) == 0
