"""The linear response against references that do not use jax.jvp: central finite differences and
the full Jacobian (jax.jacfwd) in float64, and the window's closed-form reach."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from nohair_jax.jacobian import linear_response
from nohair_jax.model import Probe

P, T = 3, 12


def _pairs(seed: int, vocab: int = 64, n: int = 2, prompt_len: int = P, length: int = T):
    rng = np.random.default_rng(seed)
    return (rng.integers(0, vocab, (n, prompt_len)), rng.integers(0, vocab, (n, prompt_len)),
            rng.integers(0, vocab, (n, length)))


class _Shift(Probe):
    """h_0 + shift: a probe of the test's own (jacobian.py has its own)."""

    shift: jax.Array

    def embedding(self, x0):
        return x0 + self.shift


def _float64_states(model, tokens):
    """h(shift): the continuation's states [L+1, T, D] of one sequence, in float64, as a function of a
    shift [P, D] of the prompt's rows of h_0."""
    graphdef, state = nnx.split(model)
    state = jax.tree.map(lambda x: x.astype(jnp.float64), state)
    model64 = nnx.merge(graphdef, state)

    def states(shift):
        full = jnp.pad(shift, ((0, T), (0, 0)))[None]
        return model64(jnp.asarray(tokens)[None], probe=_Shift(shift=full)).hidden[:, 0, -T:]
    return model64, states


def test_along_pair_is_the_central_finite_difference(make_tiny):
    model = make_tiny(seed=1)
    a, b, c = _pairs(0)
    got = linear_response(model, a, b, c, float64=True).along_pair
    eps = 1e-5
    with jax.enable_x64(True):
        for k in range(a.shape[0]):
            model64, states = _float64_states(model, np.concatenate([a[k], c[k]]))
            delta = model64.embed(jnp.asarray(b[k])) - model64.embed(jnp.asarray(a[k]))
            diff = (states(eps * delta) - states(-eps * delta)) / (2 * eps)
            want = np.linalg.norm(np.asarray(diff), axis=-1)  # [L+1, T]
            np.testing.assert_allclose(got[k], want, rtol=1e-7, atol=1e-9 * want.max())
    assert (got[:, 1:] > 0).all()


def test_frobenius_estimate_against_the_full_jacobian(make_tiny):
    model = make_tiny(seed=2)
    a, b, c = _pairs(1, n=1)
    got = linear_response(model, a, b, c, n_random=512, seed=3, float64=True).frobenius[0]  # [L+1, T]
    with jax.enable_x64(True):
        model64, states = _float64_states(model, np.concatenate([a[0], c[0]]))
        jacobian = jax.jacfwd(states)(jnp.zeros((P, model.config.d_model)))  # [L+1, T, D, P, D]
        exact = np.sqrt(np.sum(np.square(np.asarray(jacobian)), axis=(2, 3, 4)))
    assert (got[0] == 0).all() and (exact[0] == 0).all()  # h_0 of the continuation: its own tokens only
    error = np.abs(got[1:] / exact[1:] - 1)
    assert np.median(error) < 0.03 and error.max() < 0.12, (np.median(error), error.max())


def test_identical_prompts_and_layer_zero_are_exactly_zero(make_tiny):
    model = make_tiny()
    a, _, c = _pairs(2)
    response = linear_response(model, a, a, c)
    assert (response.along_pair == 0).all()
    assert (response.frobenius[:, 0] == 0).all() and (response.frobenius[:, 1:] > 0).all()
    np.testing.assert_array_equal(response.t, np.arange(1, T + 1))


def test_a_window_bounds_the_reach(make_tiny):
    """Query i reads keys i - W < j <= i, so a layer-l state at P + t - 1 depends on the prompt only for
    t <= l (W - 1): beyond it the response is exactly 0, before it above 0."""
    window, length = 4, 20
    model = make_tiny(sliding_window=window)
    a, b, c = _pairs(3, length=length)
    response = linear_response(model, a, b, c)
    t = response.t
    for layer in range(1, model.config.n_layers + 1):
        inside = t <= layer * (window - 1)
        for x in (response.along_pair, response.frobenius):
            assert (x[:, layer, ~inside] == 0).all() and (x[:, layer, inside] > 0).all(), layer


def test_bad_input_is_one_line(make_tiny):
    model = make_tiny(position="rope")
    a, b, c = _pairs(4)
    with pytest.raises(ValueError, match=r"one length, got P_a=3 and P_b=2"):
        linear_response(model, a, b[:, :2], c)
    with pytest.raises(ValueError, match=r"n_random must be an int >= 1, got 0"):
        linear_response(model, a, b, c, n_random=0)


def test_overflowing_activations_are_one_line_before_anything_is_fitted(make_tiny):
    """Finite parameters whose activations overflow float32 (an MLP scaled by 1e30): the offsets and
    the linear response each name the first non-finite entry, as the offsets always have."""
    from nohair_jax.offsets import prompt_pair_offsets

    model = make_tiny()
    for blk in model.blocks:
        blk.mlp.down.kernel[...] = blk.mlp.down.kernel[...] * 1e30
    a, b, c = _pairs(5)
    with pytest.raises(ValueError, match=r"^non-finite l2 offset at pair 0, layer \d, t = \d+: the activations overflowed$"):
        prompt_pair_offsets(model, a, b, c)
    with pytest.raises(ValueError, match=r"^non-finite linear response along the pair at pair 0, layer \d, t = \d+: "):
        linear_response(model, a, b, c)
