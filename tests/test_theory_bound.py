"""The sympy derivation of the explicit bound (nohair_jax.theory.bound): it runs, checks itself,
and its lambdified results agree with formulas written out here by hand."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nohair_jax import relay
from nohair_jax.theory import bound as theory

GELU_LIP = 0.5 * (1 + math.erf(1)) + math.exp(-1) / math.sqrt(math.pi)


def test_derivation_runs_and_checks_itself(derivation_output):
    # Its steps check sympy identities and random and near-extremal numeric instances.
    printed = derivation_output(theory)
    assert "C_2 = " in printed and "a_l = " in printed


def _measured(rng, **fixed):
    values = {s.name: rng.uniform(0.1, 2.0) for s in theory.BLOCK_SYMBOLS}
    return {**values, "d": 64, "d_head": 16, "G": 2, **fixed}


def test_block_coefficients_match_the_formula_by_hand():
    rng = np.random.default_rng(0)
    for _ in range(5):
        m = _measured(rng)
        radius = m["g_attn"] * math.sqrt(m["d"]) + m["beta_attn"]
        v = m["w_v"] * m["g_attn"] * math.sqrt(m["d"])
        k = m["w_k"] * radius + m["b_k"]
        q = m["w_q"] * radius + m["b_q"]
        alpha_q = m["w_o"] * v * k * m["w_q"] / math.sqrt(m["d_head"])
        alpha_kv = m["w_o"] * math.sqrt(m["G"]) * (m["w_v"] + 2 * v * q * m["w_k"] / math.sqrt(m["d_head"]))
        lam = m["g_attn"] / m["sigma_attn"]
        mlp_gain = 1 + m["g_mlp"] / m["sigma_mlp"] * m["w_down"] * GELU_LIP * m["w_up"]
        a, b = theory.block_coefficients("gelu", **m)
        assert a == pytest.approx(mlp_gain * (1 + lam * alpha_q), rel=1e-12)
        assert b == pytest.approx(mlp_gain * math.exp(2 * m["B"]) * lam * alpha_kv, rel=1e-12)


def test_swiglu_lipschitz_on_the_ball_and_per_layer_arrays():
    rng = np.random.default_rng(1)
    m = _measured(rng, g_mlp=1.5, beta_mlp=0.5, d=16)
    radius = 1.5 * 4 + 0.5
    silu_lip = 1.0998393201288669  # max of (x sigmoid(x))', at x = 2.3994
    lip = m["w_down"] * (silu_lip * m["w_gate"] * (m["w_up"] * radius + m["b_up"])
                         + (m["w_gate"] * radius + m["b_gate"]) * m["w_up"])
    a, _ = theory.block_coefficients("swiglu", **m)
    a_no_mlp, _ = theory.block_coefficients("swiglu", **{**m, "w_down": 0.0})
    assert a / a_no_mlp == pytest.approx(1 + m["g_mlp"] / m["sigma_mlp"] * lip, rel=1e-9)
    # One value per layer: arrays in, arrays out, each layer as if alone.
    layers = {k: np.array([v, 2 * v]) if k == "B" else v for k, v in m.items()}
    a2, b2 = theory.block_coefficients("swiglu", **layers)
    assert a2.shape == b2.shape == (2,)
    assert b2[1] == pytest.approx(theory.block_coefficients("swiglu", **{**m, "B": 2 * m["B"]})[1], rel=1e-12)


def test_bad_arguments_are_refused():
    with pytest.raises(TypeError, match="missing"):
        theory.block_coefficients("gelu", B=1.0)
    with pytest.raises(ValueError, match="unknown MLP kind"):
        theory.mlp_lipschitz("tanh")
    with pytest.raises(ValueError, match="one entry per layer"):
        theory.explicit_constant([1.0, 2.0], [1.0], [1.0], 4)


def test_explicit_constant_matches_the_unrolled_formula_by_hand():
    a, b, D = [3.0, 5.0], [7.0, 11.0], [0.5, 2.0]
    for prompt_len in (1, 4, 16):
        ell0 = math.log(max(prompt_len, 3))
        c1 = D[0] * b[0]
        # Q_2(u) = D0 a2 b1 + D1 b2 + D0 b1 b2 u, then log n <= (1 + log 2/ell0) log t and 1 <= log t / ell0.
        c2 = (D[0] * a[1] * b[0] + D[1] * b[1]) / ell0 + D[0] * b[0] * b[1] * (1 + math.log(2) / ell0)
        np.testing.assert_allclose(theory.explicit_constant(a, b, D, prompt_len), [c1, c2], rtol=1e-12)
    assert theory.explicit_threshold(2) == 3 and theory.explicit_threshold(16) == 16


def _recursion(prompt_len, length, a, b, D):
    """The block recursion with equality, written out independently of nohair_jax.relay: [L+1, T]."""
    n = prompt_len + np.arange(1.0, length + 1)
    rows = [np.zeros(length)]
    for a_l, b_l, d_l in zip(a, b, D):
        rows.append(a_l * rows[-1] + b_l * (prompt_len * d_l + np.cumsum(rows[-1])) / n)
    return np.array(rows)


@settings(max_examples=40, deadline=None)
@given(
    depth=st.integers(1, 5),
    prompt_len=st.integers(1, 40),
    seed=st.integers(0, 2**32 - 1),
)
def test_closed_form_dominates_the_recursion(depth, prompt_len, seed):
    # The unrolled constant bounds the recursion it came from, at every t >= t0, for any coefficients.
    rng = np.random.default_rng(seed)
    a, b, D = rng.uniform(0, 4, depth), rng.uniform(0, 4, depth), rng.uniform(0, 3, depth)
    length = 2000
    exact = _recursion(prompt_len, length, a, b, D)
    t = np.arange(1.0, length + 1)
    late = t >= theory.explicit_threshold(prompt_len)
    constant = theory.explicit_constant(a, b, D, prompt_len)
    for layer in range(1, depth + 1):
        closed = constant[layer - 1] * prompt_len * np.log(t[late]) ** (layer - 1) / t[late]
        assert (exact[layer][late] <= closed * (1 + 1e-12)).all()


def test_reference_recursion_is_what_the_library_evaluates():
    a, b, D = [0.5, 2.0, 1.0], [2.0, 0.3, 4.0], [1.0, 2.0, 3.0]
    library = relay.offsets(4, 50, 3, residual=np.array(a), direct=np.array(b), relay=np.array(b),
                            prompt_offset=np.array(D))
    np.testing.assert_allclose(np.asarray(library), _recursion(4, 50, a, b, D), rtol=1e-13)


def test_closed_form_tends_to_the_leading_term_of_the_solvable_model():
    # a = 0, b = D = 1 is the relay model: C_L -> 1/(L-1)! as t0 grows (the bound's shape is attained).
    for depth in (1, 2, 3):
        constant = theory.explicit_constant(np.zeros(depth), np.ones(depth), np.ones(depth), 10**12)[-1]
        assert constant == pytest.approx(1 / math.factorial(depth - 1), rel=0.2)
        assert constant >= 1 / math.factorial(depth - 1)
