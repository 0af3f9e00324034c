"""The relay model (nohair_jax.relay) against references built here, independently of it."""

import math
from fractions import Fraction

import jax
import numpy as np
import pytest
import sympy as sp

from nohair_jax import relay
from nohair_jax.theory import relay as theory

EULER_GAMMA = 0.5772156649015329


def harmonic(p):
    return math.fsum(1.0 / j for j in range(1, p + 1))


def causal_averaging(prompt_len, length, depth, residual):
    """The solvable model itself, run on every position in exact rationals.

    Embedding offsets: 1 on the prompt, 0 on the continuation; each block is
    h(i) <- a h(i) + mean_{j <= i} h(j) over all positions (prompt ones included, so the
    prompt offsets evolve by themselves). Returns [depth + 1][length] continuation offsets.
    """
    a = 1 if residual else 0
    h = [Fraction(1)] * prompt_len + [Fraction(0)] * length
    rows = [h[prompt_len:]]
    for _ in range(depth):
        prefix, new = Fraction(0), []
        for i, value in enumerate(h, start=1):
            prefix += value
            new.append(a * value + prefix / i)
        h = new
        rows.append(h[prompt_len:])
    return rows


def general_recursion(prompt_len, length, own, direct, relay_, prompt):
    """The recursion of docs/definitions.md with per-layer coefficient lists, in exact rationals."""
    rows = [[Fraction(0)] * length]
    for a, b_direct, b_relay, d in zip(own, direct, relay_, prompt):
        prev = rows[-1]
        rows.append([a * prev[t] + (b_direct * prompt_len * d + b_relay * sum(prev[: t + 1])) / (prompt_len + t + 1)
                     for t in range(length)])
    return rows


def as_float(rows):
    return np.array([[float(v) for v in row] for row in rows])


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("prompt_len", [1, 3, 5])
def test_offsets_match_exact_causal_averaging(prompt_len, residual):
    length, depth = 7, 4
    reference = causal_averaging(prompt_len, length, depth, residual)
    got = np.asarray(relay.offsets(prompt_len, length, depth, residual=residual))
    assert got.shape == (depth + 1, length) and got.dtype == np.float64
    assert np.all(got[0] == 0.0)
    np.testing.assert_allclose(got, as_float(reference), rtol=1e-14, atol=0)
    assert relay.offsets_exact(prompt_len, length, depth, residual=residual) == reference


def test_offsets_general_coefficients():
    prompt_len, length = 4, 6
    own = [Fraction(1), Fraction(1, 2), Fraction(3, 2)]
    direct = [Fraction(2), Fraction(1, 3), Fraction(1)]
    relay_ = [Fraction(5, 4), Fraction(1), Fraction(1, 7)]
    given = [Fraction(1), Fraction(3), Fraction(2, 5)]
    floats = {k: np.array([float(v) for v in c]) for k, c in
              dict(residual=own, direct=direct, relay=relay_, prompt_offset=given).items()}
    got = relay.offsets(prompt_len, length, 3, **floats)
    np.testing.assert_allclose(got, as_float(general_recursion(prompt_len, length, own, direct, relay_, given)),
                               rtol=1e-14)
    # A scalar D_0 is propagated as D_l = (a_l + direct_l) D_{l-1}.
    d0 = Fraction(3, 2)
    propagated = [d0, d0 * (own[0] + direct[0]), d0 * (own[0] + direct[0]) * (own[1] + direct[1])]
    got = relay.offsets(prompt_len, length, 3, **(floats | dict(prompt_offset=1.5)))
    np.testing.assert_allclose(got, as_float(general_recursion(prompt_len, length, own, direct, relay_, propagated)),
                               rtol=1e-14)


def test_offsets_jit_and_depth_zero():
    jitted = jax.jit(relay.offsets, static_argnames=("prompt_len", "length", "depth"))
    with jax.enable_x64(True):
        coeffs = jax.numpy.array([0.5, 1.0])
        np.testing.assert_allclose(jitted(3, 5, 2, relay=coeffs),
                                   relay.offsets(3, 5, 2, relay=np.array([0.5, 1.0])), rtol=1e-15)
    assert np.asarray(relay.offsets(3, 5, 0)).shape == (1, 5)
    with pytest.raises(ValueError):
        relay.offsets(0, 5, 2)


def test_deep_relay_barely_decays():
    # delta_L = Pr[N_n < L] <= 1 without residual: for L well above log(t/P) the offset stays
    # near 1 across the whole range; the decay only starts once log(t/P) passes L.
    rows = np.asarray(relay.offsets(16, 1000, 40))
    assert np.all(rows <= 1.0 + 1e-12) and np.all(np.diff(rows, axis=0) >= 0)
    assert rows[40, -1] > 0.999 and rows[2, -1] < 0.1


@pytest.mark.parametrize("prompt_len", [1, 16])
def test_closed_form_matches_recursion(prompt_len):
    length, depth = 100_000, 4
    t = np.arange(1, length + 1, dtype=np.float64)
    for residual in (False, True):
        rows = np.asarray(relay.offsets(prompt_len, length, depth, residual=residual))
        for layer in range(depth + 1):
            got = np.asarray(relay.closed_form(prompt_len, t, layer, residual=residual))
            np.testing.assert_allclose(got, rows[layer], rtol=1e-11, atol=0)


@pytest.mark.parametrize("residual", [False, True])
def test_closed_form_matches_sympy_at_real_t(residual):
    # Non-integer and huge t: the library's jax special functions against sympy/mpmath
    # evaluating the theory module's closed form.
    prompt_len, ts = 16, [0.5, 2.5, 1000.3, 1e9, 1e12]
    for depth in range(1, 5):
        expr = theory.closed_form(depth, residual).subs(theory.P, prompt_len)
        want = [float(expr.subs(theory.n, prompt_len + sp.Float(t, 30)).evalf(30)) for t in ts]
        np.testing.assert_allclose(relay.closed_form(prompt_len, np.array(ts), depth, residual=residual), want,
                                   rtol=1e-13)


@pytest.mark.parametrize("residual", [False, True])
def test_asymptotic_relative_error_falls_like_inverse_log(residual):
    prompt_len = 16
    t = np.logspace(3, 6, 7)
    u = np.log(t)
    for depth in range(2, 5):
        exact = np.asarray(relay.closed_form(prompt_len, t, depth, residual=residual))
        err1 = relay.asymptotic(prompt_len, t, depth, order=1, residual=residual) / exact - 1
        err2 = relay.asymptotic(prompt_len, t, depth, order=2, residual=residual) / exact - 1
        # Leading relative error -(L-1)(W_{L-2} + gamma - H_P)/log t with W_{L-2} = 1, or
        # L + 1 with residual: err1 * log t stays bounded and tends to that constant.
        kappa = -(depth - 1) * ((depth + 1 if residual else 1) + EULER_GAMMA - harmonic(prompt_len))
        distance = np.abs(err1 * u - kappa)
        assert np.all(np.diff(distance) < 0)
        assert np.all(np.abs(err2) < np.abs(err1))
        full = relay.asymptotic(prompt_len, t, depth, residual=residual) / exact - 1
        # The full expansion drops P/n versus P/t and log n versus log t: relative ~ P/t.
        assert np.all(np.abs(full) < 2 * prompt_len / t)


@pytest.mark.parametrize("residual", [False, True])
def test_asymptotic_matches_sympy_polynomial_far_out(residual):
    prompt_len, ts = 16, [1e8, 1e12, 1e20, 1e40]
    for depth in range(1, 5):
        poly = theory.asymptotic_polynomial(depth, residual).subs(theory.prompt_constants(prompt_len, depth))
        want = [prompt_len / t * float(poly.subs(theory.u, sp.log(sp.Float(t, 30))).evalf(30)) for t in ts]
        np.testing.assert_allclose(relay.asymptotic(prompt_len, np.array(ts), depth, residual=residual), want,
                                   rtol=1e-13)
    with pytest.raises(ValueError):
        relay.asymptotic(prompt_len, 1e3, 3, order=4)


@pytest.mark.parametrize("residual", [False, True])
def test_local_exponent_rises_towards_one(residual):
    prompt_len = 16
    t = np.logspace(0, 12, 49)
    u = np.log(1e12)
    for depth in range(1, 5):
        alpha = np.asarray(relay.local_exponent(prompt_len, t, depth, residual=residual))
        assert np.all(alpha > 0) and np.all(alpha < 1) and np.all(np.diff(alpha) > 0)
        gap = 1 - alpha[-1]
        # 1 - E'(u)/E(u) for delta ~ (P/t) E(log t), up to O(P/t) = 1.6e-11 here.
        poly = theory.asymptotic_polynomial(depth, residual).subs(theory.prompt_constants(prompt_len, depth))
        want = float((sp.diff(poly, theory.u) / poly).subs(theory.u, u))
        assert abs(gap - want) < 1e-9
        # First order (L-1)/log t; its error is the second-order term, (L-1)|W_{L-2} + c_1|/log^2 t.
        second = (depth - 1) * abs((depth + 1 if residual else 1) + EULER_GAMMA - harmonic(prompt_len)) / u**2
        assert abs(gap - (depth - 1) / u) <= 2 * second + 1e-9


@pytest.mark.parametrize("residual", [False, True])
def test_local_exponent_matches_recursion_finite_difference(residual):
    prompt_len, length = 16, 4000
    rows = np.log(np.asarray(relay.offsets(prompt_len, length, 4, residual=residual))[1:])
    for depth in range(1, 5):
        t = np.array([30, 300, 3000])
        # Central difference in log t; its error is O(step^2) = O(1/t^2) times an O(1)
        # third derivative of log delta in log t.
        fd = -(rows[depth - 1, t] - rows[depth - 1, t - 2]) / (np.log(t + 1) - np.log(t - 1))
        exact = np.asarray(relay.local_exponent(prompt_len, t, depth, residual=residual))
        assert np.all(np.abs(fd - exact) < 1.0 / t**2)


@pytest.mark.parametrize("call, match", [
    (lambda: relay.closed_form(16, [4.0, -1.0], 2), r"t must hold finite positions > 0, got \[-1.0\]"),
    (lambda: relay.local_exponent(16, 0.0, 2), "t must hold finite positions > 0"),
    (lambda: relay.asymptotic(16, np.inf, 2), "t must hold finite positions > 0"),
    (lambda: relay.closed_form(np.array([4, 16]), 10.0, 2), "prompt_len must be one real number > 0 .loop over several"),
    (lambda: relay.local_exponent(0, 10.0, 2), "prompt_len must be one real number > 0"),
    (lambda: relay.local_exponent(16, 10.0, 0), "depth must be an integer >= 1, got 0"),
    (lambda: relay.closed_form(16, 10.0, 2.5), "depth must be an integer >= 0, got 2.5"),
])
def test_closed_forms_refuse_bad_input_by_name(call, match):
    with pytest.raises(ValueError, match=match):
        call()
