"""The calibrated relay model (nohair_jax.calibrated_relay): pure dilution is the solvable recursion
(``relay.offsets``, float64); on a transformer built to be the relay model the calibration reads back its
constants (uniform attention, MLP gain 1, value gain s / sigma_l, offsets pointing one way) and predicts its
offsets; on one whose two heads read differently (one uniform, one drawn to the prompt) through value paths
of different gains, reading each head at each key predicts them too, where the heads' mean could not."""

import numpy as np
import pytest
from flax import nnx
from test_relay_transformer import EPS, P, S, T, relay_transformer

import nohair_jax as nh
from nohair_jax.calibrated_relay import CalibratedRelay, _mlp_gain, calibrate_relay, dilution_relay


@pytest.mark.parametrize("depth, mlp_gain, value_gain, coherence", [
    (1, [1.0], [1.0], 1.0),
    (3, [1.0, 1.0, 1.0], [0.5, 2.0, 1.5], 1.0),
    (4, [0.8, 1.3, 1.0, 0.6], [1.2, 0.7, 2.5, 0.9], [0.2, 0.5, 1.0, 0.3]),
])
def test_pure_dilution_is_the_solvable_recursion(depth, mlp_gain, value_gain, coherence):
    """W(n, j) = 1 / n, rho = 1, beta = 0: delta_l = m delta_{l-1} + m kappa v (P D_{l-1} + sum_j delta_{l-1}(j)) / n,
    which is relay.offsets with residual m and direct = relay = m kappa v (its prompt offsets given layer by layer)."""
    prompt_len, length = 5, 40
    prompt = np.linspace(1.0, 2.0, depth)
    relay = dilution_relay(prompt_len, length, value_gain=value_gain, mlp_gain=mlp_gain, coherence=coherence,
                           prompt_offsets=np.repeat(prompt[:, None], prompt_len, axis=1))
    m, read = np.asarray(mlp_gain), np.asarray(mlp_gain) * np.asarray(value_gain) * np.asarray(coherence)
    want = np.asarray(nh.relay.offsets(prompt_len, length, depth, residual=m, direct=read, relay=read, prompt_offset=prompt))
    np.testing.assert_allclose(relay.offsets(), want, rtol=1e-12, atol=0)


def test_the_own_path_and_the_read_add_at_their_cosine_and_the_mlp_gain_follows_the_size():
    """Two layers, closed forms: layer 1 has no own path, delta_1 = m1 x1 (x1 / x*_1)^beta_1 with x1 = kappa_1 s_1;
    layer 2 adds delta_1 and its read r2 = kappa_2 (s_2 + A_2 delta_1) as vectors at cosine rho_2."""
    length, t = 6, np.arange(1, 7)
    s = np.stack([8.0 / (4 + t), 3.0 / (4 + t)])
    weights = np.stack([np.zeros((length, length)), 0.1 * np.tril(np.ones((length, length)))])
    relay = CalibratedRelay(4, s, weights, coherence=np.array([0.5, 0.25]), cosine=np.array([1.0, -0.3]),
                            mlp_gain=np.array([1.5, 0.8]), mlp_exponent=np.array([-0.2, 0.1]),
                            mlp_size=np.array([0.5, 2.0]), value_gain=np.ones(2))
    x1 = 0.5 * s[0]
    d1 = 1.5 * x1 * (x1 / 0.5) ** -0.2
    r2 = 0.25 * (s[1] + 0.1 * np.cumsum(d1))
    x2 = np.sqrt(d1**2 + r2**2 - 0.6 * d1 * r2)
    np.testing.assert_allclose(relay.offsets(), np.stack([0 * t, d1, 0.8 * x2 * (x2 / 2.0) ** 0.1]), rtol=1e-12)


def test_the_mlp_gain_is_a_power_of_the_offsets_size():
    """Gains drawn from m (x / x*)^beta with noise that averages out in log: the least squares recover m, beta
    and x* = the median size; a layer of constant sizes gets beta 0, one with no offsets m 1."""
    rng = np.random.default_rng(0)
    size = np.exp(rng.uniform(-3, 1, (3, 4, 50)))
    noise = np.exp(rng.normal(0, 1e-3, size.shape))
    size[1] = 2.0
    want_m, want_beta = np.array([1.7, 0.9, 1.0]), np.array([-0.35, 0.0, 0.0])
    x_star = np.median(size.reshape(3, -1), axis=1)
    out = size * want_m[:, None, None] * (size / x_star[:, None, None]) ** want_beta[:, None, None] * noise
    out[2] = 0.0
    gain, beta, reference = _mlp_gain(size, out)
    np.testing.assert_allclose(reference[:2], x_star[:2])
    np.testing.assert_allclose(beta, want_beta, atol=1e-3)
    np.testing.assert_allclose(gain, want_m, rtol=1e-3)


def _scales(model, tokens, depth: int) -> np.ndarray:
    """sigma_l: the input scale of block l's attention norm at every position [depth, N] (one sequence)."""
    return np.asarray(model(tokens, probe=nh.BoundQuantities()).norms)[0:2 * depth:2, 0]


@pytest.mark.parametrize("depth", [1, 3])
def test_calibration_reads_the_relay_transformer_back(depth):
    """The relay transformer's attention is uniform (zero queries and keys), its MLP adds nothing, its one head's
    value path is s I after a LayerNorm acting as 1 / sigma_l along the offsets, and every offset points along
    one direction: the calibration must find the prompt read s P D_{l-1} / (sigma_l n), relay weights
    s / (sigma_l n), kappa = rho = 1, m = 1, beta = 0, v = s / sigma_l, and its prediction the measured offsets
    (to the first order in the embeddings' difference, as tests/test_relay_transformer.py)."""
    model, prompt_offset = relay_transformer(depth)
    a, b, c = np.ones((1, P), np.int32), np.full((1, P), 2, np.int32), np.zeros((1, T), np.int32)
    relay = calibrate_relay(model, a, b, c)
    gain = S / _scales(model, np.concatenate([a, c], 1), depth)[:, -1]
    n = P + np.arange(1, T + 1)
    prompt = prompt_offset * np.cumprod(np.concatenate([[1.0], 1 + gain[:-1]]))  # D_{l-1}: every key a prompt key
    np.testing.assert_allclose(relay.prompt_read, (gain * P * prompt)[:, None] / n, rtol=1e-3)
    dilution = np.tril(np.ones((T, T))) / n[:, None]
    np.testing.assert_allclose(relay.relay_weights[0], 0)  # delta_0 = 0 on the continuation: no gain to read
    np.testing.assert_allclose(relay.relay_weights[1:], gain[1:, None, None] * dilution, rtol=1e-3, atol=1e-9)
    np.testing.assert_allclose([relay.coherence, relay.cosine, relay.mlp_gain], 1.0, rtol=1e-4)
    np.testing.assert_allclose(relay.mlp_exponent, 0.0, atol=1e-3)
    np.testing.assert_allclose(relay.value_gain, gain, rtol=1e-3)
    np.testing.assert_allclose(relay.offsets()[1:], relay.measured[1:], rtol=2e-3)
    # The offsets it reads are the project's measurement of them (prompt_pair_offsets, float64).
    np.testing.assert_allclose(relay.measured, nh.prompt_pair_offsets(model, a, b, c, float64=True).l2[0], rtol=1e-3)


HEAD_GAINS, PULL = (0.7, 0.2), 2.0


def two_head_relay_transformer(depth: int):
    """A relay transformer whose two heads read differently: head 1 uniformly (zero query and key), head 2 drawn
    to the prompt's keys (logit PULL sqrt(2) from a continuation query, 0 on a continuation key), each through a
    value path of its own gain (``HEAD_GAINS``) along the offsets' plane. The prompts' tokens embed to c' +- EPS u
    and the continuation's to c, of other LayerNorm scales (0.71 and 0.5), so the gain also differs from key to
    key; values carry only u's plane, so the stream stays c or c' to first order and the weights do not change."""
    cfg = nh.TransformerConfig(vocab_size=3, d_model=8, n_heads=2, n_layers=depth, position="none", bias=False,
                               max_len=P + T)
    model = nh.Transformer(cfg, rngs=nnx.Rngs(0))
    c, u = np.zeros(8), np.zeros(8)
    c[:2], u[2:4] = [1.0, -1.0], [1.0, -1.0]
    prompt = c.copy()
    prompt[6:8] = [1.0, -1.0]
    model.embed.embedding[...] = np.stack([c, prompt + EPS * u, prompt - EPS * u]).astype(np.float32)
    zero = np.zeros((8, 8), np.float32)
    q, k, v, o = zero.copy(), zero.copy(), zero.copy(), zero.copy()
    q[0, 4], k[6, 4] = 1.0, PULL  # head 2's columns are 4..7: the query reads feature 0, the key feature 6
    for head, gain in enumerate(HEAD_GAINS):
        v[2, 4 * head], v[3, 4 * head + 1] = 1.0, 1.0  # u's plane into the head's first two slots
        o[4 * head, 2], o[4 * head + 1, 3] = gain, gain  # and back, scaled by the head's gain
    for block in model.blocks:
        block.attn.q.kernel[...], block.attn.k.kernel[...] = q, k
        block.attn.v.kernel[...], block.attn.o.kernel[...] = v, o
        block.mlp.down.kernel[...] = 0 * block.mlp.down.kernel[...]
    return model


@pytest.mark.parametrize("depth", [1, 3])
def test_heads_reading_differently_are_read_head_by_head_and_key_by_key(depth):
    """Head 2 puts most of a continuation query's weight on the prompt, head 1 spreads it; the exact first-order
    recursion is delta_l(n) = delta_{l-1}(n) + sum_h g_h sum_j W^h(n, j) delta_{l-1}(j) / sigma_l(j): the prediction
    must be the measured offsets (float64), and the relay weights each head's weights times its gain over
    the key's scale."""
    model = two_head_relay_transformer(depth)
    a, b, c = np.ones((1, P), np.int32), np.full((1, P), 2, np.int32), np.zeros((1, T), np.int32)
    relay = calibrate_relay(model, a, b, c)
    measured = nh.prompt_pair_offsets(model, a, b, c, float64=True).l2[0]
    np.testing.assert_allclose(relay.offsets()[1:], measured[1:], rtol=2e-3)
    # Head 2's weights in closed form: e^(PULL sqrt 2) on each prompt key, 1 on each continuation key.
    n = P + np.arange(1, T + 1)
    pulled = np.exp(2.0 * (PULL * np.sqrt(2.0)) / np.sqrt(4.0))  # q = LN(c)_0 = 2, k = PULL LN(c')_6, / sqrt(head_dim)
    head2 = np.tril(np.ones((T, T))) / (P * pulled + (n - P))[:, None]
    head1 = np.tril(np.ones((T, T))) / n[:, None]
    sigma = _scales(model, np.concatenate([a, c], 1), depth)[:, P:]  # [L, T]: the continuation's keys
    want = (HEAD_GAINS[0] * head1 + HEAD_GAINS[1] * head2)[None] / sigma[:, None, :]
    np.testing.assert_allclose(relay.relay_weights[1:], want[1:], rtol=1e-3, atol=1e-9)
    np.testing.assert_allclose([relay.coherence, relay.cosine, relay.mlp_gain], 1.0, rtol=1e-4)


def test_on_a_random_model_the_prediction_is_finite_and_the_reads_are_causal(make_tiny):
    model = make_tiny(seed=3)
    pairs = nh.random_prompt_pairs(0, 2, 4, 20, model.config.vocab_size)
    relay = calibrate_relay(model, *pairs)
    assert np.all(np.triu(relay.relay_weights, k=1) == 0) and (relay.prompt_read > 0).all()
    assert (relay.coherence > 0).all() and (np.abs(relay.cosine) <= 1).all() and (relay.mlp_size > 0).all()
    predicted = relay.offsets()
    assert predicted.shape == relay.measured.shape and np.isfinite(predicted).all() and (predicted[1:] > 0).all()
    fits = relay.alphas(t_min=4)
    assert len(fits) == model.config.n_layers and all(seen is not None for _, seen in fits)
    # One pair alone is that pair's own relay; the pooled reads are the pairs' mean.
    alone = [calibrate_relay(model, *(x[i:i + 1] for x in pairs)) for i in range(2)]
    np.testing.assert_allclose(relay.prompt_read, np.mean([r.prompt_read for r in alone], axis=0), rtol=1e-12)
    np.testing.assert_allclose(relay.measured, np.mean([r.measured for r in alone], axis=0), rtol=1e-12)


def test_a_block_it_is_not_stated_for_is_refused_in_one_line():
    cfg = nh.TransformerConfig(vocab_size=11, d_model=8, n_heads=2, n_layers=1, norm_placement="post", max_len=16)
    pairs = nh.random_prompt_pairs(0, 1, 2, 6, 11)
    with pytest.raises(ValueError, match="stated for pre-LN blocks, this model has post-LN"):
        calibrate_relay(nh.Transformer(cfg, rngs=nnx.Rngs(0)), *pairs)
