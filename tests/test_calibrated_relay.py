"""The calibrated relay model (nohair_jax.calibrated_relay): pure dilution is the solvable recursion
(``relay.offsets``, float64), and on a transformer built to be the relay model the calibration reads
back its constants (uniform attention, MLP gain 1, value gain s / sigma_l) and predicts its offsets."""

import numpy as np
import pytest
from flax import nnx
from test_relay_transformer import EPS, P, S, T, relay_transformer

import nohair_jax as nh
from nohair_jax.calibrated_relay import calibrate_relay, dilution_relay


@pytest.mark.parametrize("depth, mlp_gain, value_gain", [
    (1, [1.0], [1.0]),
    (3, [1.0, 1.0, 1.0], [0.5, 2.0, 1.5]),
    (4, [0.8, 1.3, 1.0, 0.6], [1.2, 0.7, 2.5, 0.9]),
])
def test_pure_dilution_is_the_solvable_recursion(depth, mlp_gain, value_gain):
    """W(n, j) = 1 / n: delta_l = m delta_{l-1} + m v (P D_{l-1} + sum_j delta_{l-1}(j)) / n, which is
    relay.offsets with residual m and direct = relay = m v (its prompt offsets given layer by layer)."""
    prompt_len, length = 5, 40
    prompt = np.linspace(1.0, 2.0, depth)
    relay = dilution_relay(prompt_len, length, value_gain=value_gain, mlp_gain=mlp_gain,
                           prompt_offsets=np.repeat(prompt[:, None], prompt_len, axis=1))
    m, v = np.asarray(mlp_gain), np.asarray(value_gain)
    want = np.asarray(nh.relay.offsets(prompt_len, length, depth, residual=m, direct=m * v, relay=m * v,
                                       prompt_offset=prompt))
    np.testing.assert_allclose(relay.offsets(), want, rtol=1e-12, atol=0)


@pytest.mark.parametrize("depth", [1, 3])
def test_calibration_reads_the_relay_transformer_back(depth):
    """The relay transformer's attention is uniform (zero queries and keys), its MLP adds nothing, and its
    value path is s I after a LayerNorm acting as 1 / sigma_l along the offsets: the calibration must find
    W = 1 / n, m = 1, v = s / sigma_l, and its prediction the measured offsets (to the first order in the
    embeddings' difference, as tests/test_relay_transformer.py)."""
    model, _ = relay_transformer(depth)
    a, b, c = np.ones((1, P), np.int32), np.full((1, P), 2, np.int32), np.zeros((1, T), np.int32)
    relay = calibrate_relay(model, a, b, c)
    n = P + T
    np.testing.assert_allclose(relay.weights, np.broadcast_to(np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None],
                                                              relay.weights.shape), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(relay.mlp_gain, 1.0, rtol=1e-4)
    sigma = np.asarray(model(np.concatenate([a, c], 1), probe=nh.BoundQuantities()).norms)[0:2 * depth:2, 0, -1]
    np.testing.assert_allclose(relay.value_gain, S / sigma, rtol=1e-3)
    assert relay.prompt_offsets.shape == (depth, P) and (relay.prompt_offsets > EPS).all()
    np.testing.assert_allclose(relay.offsets()[1:], relay.measured[1:], rtol=2e-3)
    # The offsets it reads are the project's measurement of them (prompt_pair_offsets, float64).
    np.testing.assert_allclose(relay.measured, nh.prompt_pair_offsets(model, a, b, c, float64=True).l2[0], rtol=1e-3)


def test_on_a_random_model_the_prediction_is_finite_and_the_weights_are_causal(make_tiny):
    model = make_tiny(seed=3)
    pairs = nh.random_prompt_pairs(0, 2, 4, 20, model.config.vocab_size)
    relay = calibrate_relay(model, *pairs)
    np.testing.assert_allclose(relay.weights.sum(-1), 1.0, rtol=1e-5)
    assert np.all(np.triu(relay.weights, k=1) == 0)
    predicted = relay.offsets()
    assert predicted.shape == relay.measured.shape and np.isfinite(predicted).all() and (predicted[1:] > 0).all()
    fits = relay.alphas(t_min=4)
    assert len(fits) == model.config.n_layers and all(seen is not None for _, seen in fits)


def test_a_block_it_is_not_stated_for_is_refused_in_one_line():
    cfg = nh.TransformerConfig(vocab_size=11, d_model=8, n_heads=2, n_layers=1, norm_placement="post", max_len=16)
    pairs = nh.random_prompt_pairs(0, 1, 2, 6, 11)
    with pytest.raises(ValueError, match="stated for pre-LN blocks, this model has post-LN"):
        calibrate_relay(nh.Transformer(cfg, rngs=nnx.Rngs(0)), *pairs)
