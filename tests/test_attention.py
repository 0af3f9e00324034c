"""Blockwise attention against the plain path and an independent float64 numpy reference."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import nohair_jax as nh
from nohair_jax.attention import (
    BLOCKWISE_FROM, LogitTerms, alibi_slopes, blockwise_attention, plain_attention, use_blockwise,
)
from nohair_jax.model import PatchedKeysValues, PromptLogitBias, TransformerConfig
from reference_forward import Params, build, random_params, random_tokens, ref_forward


@pytest.fixture(autouse=True)
def full_precision():
    """Full float32 matmuls, so the tolerances also hold on accelerators that default to TF32."""
    with jax.default_matmul_precision("highest"):
        yield


def ref_attention(q, k, v, terms):
    """Numpy float64, one (batch, head) at a time: q [B, T, H, hd], k, v [B, T, Hkv, hd] -> [B, T, H, hd];
    ``terms`` a ``LogitTerms`` or None, written out on the (query, key) index grid."""
    terms = terms or LogitTerms()
    bias = terms.prompt_bias
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    batch, length, heads, hd = q.shape
    group = heads // k.shape[2]
    out = np.zeros_like(q)
    for b in range(batch):
        for h in range(heads):
            scores = q[b, :, h] @ k[b, :, h // group].T * (1 / math.sqrt(hd) if terms.scale is None else terms.scale)
            if bias is not None:
                for i in range(bias.prompt_len + 1, length + 1):  # 1-based queries after the prompt
                    scores[i - 1, : bias.prompt_len] += bias.gamma * math.log(i / bias.prompt_len)
            i, j = np.indices((length, length))  # query, key
            if terms.alibi is not None:
                scores -= terms.alibi[h] * (i - j)
            if terms.window is not None:
                scores[i - j >= terms.window] = -np.inf
            scores[np.triu_indices(length, 1)] = -np.inf
            weights = np.exp(scores - scores.max(-1, keepdims=True))
            out[b, :, h] = weights / weights.sum(-1, keepdims=True) @ v[b, :, h // group]
    return out


def random_qkv(seed, batch, length, heads, kv_heads, hd, scale=1.5):
    """Logits of order a few (scale 1.5 per component): attention far from uniform."""
    keys = jax.random.split(jax.random.key(seed), 3)
    shapes = ((batch, length, heads, hd), (batch, length, kv_heads, hd), (batch, length, kv_heads, hd))
    return [scale * jax.random.normal(key, shape, jnp.float32) for key, shape in zip(keys, shapes)]


@pytest.mark.parametrize(
    "batch, length, heads, kv_heads, hd, block, bias",
    [
        (1, 1, 1, 1, 4, 512, LogitTerms(PromptLogitBias(prompt_len=1))),  # one position, block larger than T
        (2, 37, 4, 4, 8, 8, None),  # T not a multiple of the block
        (2, 203, 6, 2, 16, 32, LogitTerms(PromptLogitBias(prompt_len=40, gamma=1.3))),  # grouped-query, prompt spans blocks
        # ALiBi on grouped heads (each folded row its own head's slope), a window of 19 across blocks
        # of 16 (tiles whole inside, cut by and wholly outside the window), with the prompt bias.
        (1, 90, 6, 3, 8, 16, LogitTerms(PromptLogitBias(prompt_len=5), tuple(alibi_slopes(6)), 19)),
        (2, 41, 2, 1, 8, 8, LogitTerms(window=1)),  # each query reads only itself: out = v
        (2, 45, 4, 2, 16, 16, LogitTerms(scale=0.4)),  # a logit scale of its own (Gemma's): sharper than 1/sqrt(16)
    ],
)
def test_blockwise_and_plain_match_float64_reference(batch, length, heads, kv_heads, hd, block, bias):
    q, k, v = random_qkv(length, batch, length, heads, kv_heads, hd)
    want = ref_attention(q, k, v, bias)
    plain = plain_attention(q, k, v, bias)[0]
    blockwise = jax.jit(lambda q, k, v: blockwise_attention(q, k, v, bias, block=block))(q, k, v)
    for got in (plain, blockwise):
        np.testing.assert_allclose(np.asarray(got), want, rtol=0, atol=2e-5 * np.abs(want).max())
    # The two float32 paths are as close to each other as to the reference.
    np.testing.assert_allclose(np.asarray(blockwise), np.asarray(plain), rtol=0, atol=2e-5 * np.abs(want).max())


@pytest.mark.parametrize("batch", [1, 2, 5])
def test_blockwise_schedules_agree(batch):
    """Loops and vectorised row pairs (the CPU and accelerator schedules) are one computation;
    T = 150 in blocks of 15 is 5 row pairs: a batch of 2 leaves a remainder."""
    q, k, v = random_qkv(3, 1, 150, 4, 2, 8)
    bias = LogitTerms(PromptLogitBias(prompt_len=7), tuple(alibi_slopes(4)), 40)
    want = ref_attention(q, k, v, bias)
    got = jax.jit(lambda q, k, v: blockwise_attention(q, k, v, bias, block=15, batch=batch))(q, k, v)
    np.testing.assert_allclose(np.asarray(got), want, rtol=0, atol=2e-5 * np.abs(want).max())


@pytest.mark.parametrize("lanes", [1, 4, 6, 9])
def test_blockwise_lanes_agree(lanes):
    """The 2 * 3 (sequence, key/value head) tiles cut into separate operations: evenly (1, 6),
    unevenly (4: lanes of 1 and 2 tiles) and more lanes than tiles (9); ALiBi's slopes must follow
    each tile's head across the sequences of a lane."""
    q, k, v = random_qkv(5, 2, 70, 6, 3, 8)
    bias = LogitTerms(PromptLogitBias(prompt_len=6), tuple(alibi_slopes(6)), 25)
    want = ref_attention(q, k, v, bias)
    got = jax.jit(lambda q, k, v: blockwise_attention(q, k, v, bias, block=16, lanes=lanes))(q, k, v)
    np.testing.assert_allclose(np.asarray(got), want, rtol=0, atol=2e-5 * np.abs(want).max())


@pytest.mark.parametrize("setting", [dict(block=0), dict(batch=-1), dict(lanes=0), dict(lanes=2.5)])
def test_blockwise_settings_refused_in_one_line(setting):
    q, k, v = random_qkv(6, 1, 20, 2, 1, 8)
    (name, value), = setting.items()
    with pytest.raises(ValueError, match=f"^{name} must be an int >= 1, got {value!r}$"):
        blockwise_attention(q, k, v, **setting)


def test_blockwise_gradient_matches_plain():
    """Static trip counts (lax.scan, no while loop): the blockwise path can be differentiated."""
    q, k, v = random_qkv(4, 1, 30, 2, 1, 8)
    bias = LogitTerms(PromptLogitBias(prompt_len=3), (0.5, 0.25), 11)

    def loss(fn):
        return lambda q, k, v: jnp.sum(jnp.sin(fn(q, k, v)))

    grad = lambda fn: jax.jit(jax.grad(loss(fn), argnums=(0, 1, 2)))(q, k, v)
    plain = grad(lambda q, k, v: plain_attention(q, k, v, bias)[0])
    blockwise = grad(lambda q, k, v: blockwise_attention(q, k, v, bias, block=8))
    for got, want in zip(blockwise, plain):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=0, atol=1e-5 * np.abs(want).max())


def test_choice_of_path():
    assert not use_blockwise("auto", BLOCKWISE_FROM - 1, reads_weights=False)
    assert use_blockwise("auto", BLOCKWISE_FROM, reads_weights=False)
    assert not use_blockwise("auto", 10 * BLOCKWISE_FROM, reads_weights=True)  # a probe reading the weights needs them
    assert use_blockwise("blockwise", 3, reads_weights=False)
    assert not use_blockwise("plain", 10 * BLOCKWISE_FROM, reads_weights=False)
    with pytest.raises(ValueError, match="this probe reads the full attention weights"):
        use_blockwise("blockwise", 3, reads_weights=True)
    with pytest.raises(ValueError, match="is not one of"):
        use_blockwise("flash", 3, reads_weights=False)


def small_config(**overrides):
    kw = dict(vocab_size=29, d_model=32, n_heads=4, n_kv_heads=2, n_layers=2, d_mlp=48, position="rope", max_len=64)
    return TransformerConfig(**(kw | overrides))


@pytest.mark.parametrize("family", ["prompt_bias", "gemma", "olmo2"])
def test_model_blockwise_matches_float64_reference(family):
    """The whole forward pass (rope, grouped-query, prompt bias) with forced blockwise attention in
    small blocks against the numpy float64 model of test_model and against the plain path; and
    with keys and values read from other residual streams (the patching of ``direct_relay``).
    Gemma's soft cap, logit scale, windows on some layers with their own RoPE base and sandwich
    norms, and OLMo 2's output norms (no input norm: patched keys read the raw stream), the same way."""
    cfg = small_config(**{
        "prompt_bias": dict(prompt_logit_bias=PromptLogitBias(prompt_len=6, gamma=0.8)),
        "gemma": dict(mlp="geglu", norm="rmsnorm", norm_placement="sandwich", attn_scale=0.2, attn_softcap=3.0,
                      final_softcap=5.0, sliding_window=11, window_layers=(1,), local_rope_theta=50.0, qk_norm=True),
        "olmo2": dict(mlp="swiglu", norm="rmsnorm", norm_placement="output", qk_norm=True, qk_norm_scope="projection"),
    }[family])
    params = random_params(cfg, seed=5)
    model = build(cfg, params, jnp.float32)
    tokens = jnp.asarray(random_tokens(cfg, 2, 45, seed=6))
    kv_streams = jax.random.normal(jax.random.key(7), (cfg.n_layers, 2, 45, cfg.d_model))
    run = nnx.jit(lambda model, probe: model(tokens, probe=probe))  # a probe is a pytree: its arrays are arguments
    patched = PatchedKeysValues(per_layer=kv_streams)
    want = ref_forward(cfg, Params(params), tokens)
    plain, plain_patched = run(model, None), run(model, patched)
    model.set_attributes(implementation="blockwise", block_size=8)
    blockwise, blockwise_patched = run(model, None), run(model, patched)
    scale = np.abs(want["hidden"]).max()
    for got in (plain, blockwise):
        np.testing.assert_allclose(np.asarray(got.hidden), want["hidden"], rtol=0, atol=1e-5 * scale)
    np.testing.assert_allclose(np.asarray(blockwise.logits), np.asarray(plain.logits), rtol=0, atol=1e-5 * scale)
    np.testing.assert_allclose(
        np.asarray(blockwise_patched.hidden), np.asarray(plain_patched.hidden), rtol=0, atol=1e-5 * scale
    )
    assert not np.allclose(np.asarray(plain_patched.hidden[-1]), np.asarray(plain.hidden[-1]))  # patching matters
    with pytest.raises(ValueError, match="this probe reads the full attention weights"):
        model(tokens, probe=nh.BoundQuantities())


def test_long_offsets_agree_between_paths():
    """prompt_pair_offsets at P + T = 3016 (auto takes blockwise there) against forced plain."""
    cfg = small_config(position="learned", n_kv_heads=None, max_len=3016, prompt_logit_bias=PromptLogitBias(16))
    model = nh.Transformer(cfg, rngs=nnx.Rngs(1))
    pairs = nh.random_prompt_pairs(2, 1, 16, 3000, cfg.vocab_size)
    blockwise = nh.prompt_pair_offsets(model, *pairs)  # "auto"
    model.set_attributes(implementation="plain")
    plain = nh.prompt_pair_offsets(model, *pairs)
    # l2 is a difference of hidden states: its rounding is relative to their norm, not to l2.
    np.testing.assert_allclose(blockwise.l2, plain.l2, rtol=1e-4, atol=1e-5 * plain.norm.max())
    np.testing.assert_allclose(blockwise.norm, plain.norm, rtol=1e-5)
    np.testing.assert_allclose(blockwise.kl, plain.kl, rtol=1e-3, atol=1e-6)


def temp_bytes(fn, length, heads=4, hd=32):
    """Scratch memory XLA plans for fn(q, k, v) at T = length, from the compiled program (not run)."""
    x = jax.ShapeDtypeStruct((1, length, heads, hd), jnp.float32)
    stats = jax.jit(fn).lower(x, x, x).compile().memory_analysis()
    if stats is None:
        pytest.skip("this backend reports no compiled memory statistics")
    return stats.temp_size_in_bytes


def test_memory_linear_in_length():
    """Doubling T: the blockwise scratch grows ~2x (linear), the plain one 4x (its [H, T, T] weights)."""
    blockwise = [temp_bytes(lambda q, k, v: blockwise_attention(q, k, v, block=256), t) for t in (2048, 4096)]
    plain = [temp_bytes(lambda q, k, v: plain_attention(q, k, v)[0], t) for t in (1024, 2048)]
    assert blockwise[1] / blockwise[0] < 2.5
    assert plain[1] / plain[0] > 3.5
    assert blockwise[1] < plain[1] / 10  # at T = 4096 vs 2048 already


# --- the architecture contrasts' options (docs/contrasts.md) ----------------------------------


@pytest.mark.parametrize("n_heads", [1, 2, 6, 8, 9, 12, 16, 24])
def test_alibi_slopes_are_blooms(n_heads):
    """The slopes against transformers' BLOOM (``build_alibi_tensor``, slope times key position),
    powers of two (a geometric sequence from 2^(-8/n)) and not (interleaved with 2n's)."""
    torch = pytest.importorskip("torch")
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    theirs = build_alibi_tensor(torch.ones(1, 2), n_heads, torch.float64)[:, 0, 1].numpy()
    np.testing.assert_allclose(alibi_slopes(n_heads), theirs, rtol=1e-6, atol=0)  # BLOOM raises a float32 base to powers
    exact = {8: 0.5 ** np.arange(1, 9), 6: 0.5 ** np.array([2, 4, 6, 8, 1, 3]), 9: [*0.5 ** np.arange(1, 9), 0.5 ** 0.5]}
    if n_heads in exact:
        np.testing.assert_allclose(alibi_slopes(n_heads), exact[n_heads], rtol=1e-15, atol=0)


def _large_weights(model, scale):
    """Every kernel multiplied by ``scale``: logits far beyond those of an initialised model."""
    state = nnx.state(model, nnx.Param)
    nnx.update(model, jax.tree.map(lambda x: x * scale if x.ndim == 2 else x, state))
    return model


def test_qk_norm_bounds_every_logit_by_construction():
    """With QK-norm ``|q.k| / sqrt(hd) <= sqrt(hd) max|g_q| max|g_k|`` whatever the weights; the same
    weights without it exceed that bound by far."""
    kw = dict(vocab_size=31, d_model=32, n_heads=2, n_layers=2, position="rope", max_len=64)
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, 31, (2, 40)))
    normed = _large_weights(nh.Transformer(TransformerConfig(**kw, qk_norm=True), rngs=nnx.Rngs(0)), 40.0)
    for blk, gain in zip(normed.blocks, (1.5, 0.7)):
        blk.attn.q_norm.scale[...] = gain * jnp.linspace(0.5, 1.0, 16)
        blk.attn.k_norm.scale[...] = -gain * jnp.linspace(1.0, 0.2, 16)
    plain = _large_weights(nh.Transformer(TransformerConfig(**kw), rngs=nnx.Rngs(0)), 40.0)
    bound = np.array([math.sqrt(16) * np.abs(np.asarray(b.attn.q_norm.scale[...])).max()
                      * np.abs(np.asarray(b.attn.k_norm.scale[...])).max() for b in normed.blocks])
    got = np.asarray(normed(tokens, probe=nh.BoundQuantities()).attention).max(axis=1)
    assert (got <= bound).all() and (got > 0.3 * bound).all(), (got, bound)
    assert (np.asarray(plain(tokens, probe=nh.BoundQuantities()).attention).max(axis=1) > 10 * bound).all()


@pytest.mark.parametrize("implementation", ["plain", "blockwise"])
def test_a_window_on_some_layers_only(implementation):
    """Gemma's layout: a window on layers 1 and 3 of 3 (0-based 0, 2), full attention on layer 2. The
    first layer's offset is exactly 0 beyond its reach W - 1; the full layer reads the prompt
    directly, so from layer 2 on the offset is positive at every t."""
    window, prompt_len, length = 5, 3, 24
    cfg = TransformerConfig(vocab_size=31, d_model=16, n_heads=2, n_layers=3, position="rope", max_len=64,
                            sliding_window=window, window_layers=(0, 2), local_rope_theta=100.0)
    model = nh.Transformer(cfg, rngs=nnx.Rngs(2))
    model.set_attributes(implementation=implementation, block_size=8)
    a, _, c = nh.random_prompt_pairs(1, 3, prompt_len, length, 31)
    l2 = nh.prompt_pair_offsets(model, a, (a + 1) % 31, c).l2
    t = np.arange(1, length + 1)
    assert (l2[:, 1, t > window - 1] == 0).all() and (l2[:, 1, t <= window - 1] > 0).all()
    assert (l2[:, 2:] > 0).all()


@pytest.mark.parametrize("implementation", ["plain", "blockwise"])
def test_window_reads_the_prompt_only_within_each_layers_reach(implementation):
    """With a window W a layer-l state at t depends on positions back to t - l (W - 1): the offset is
    exactly 0 for t > l (W - 1) (the prompt is out of reach, directly and through relay) and not
    before. Both attention paths, the blockwise one in blocks that the window cuts."""
    window, prompt_len, length = 5, 3, 24
    cfg = TransformerConfig(vocab_size=31, d_model=16, n_heads=2, n_layers=3, position="alibi",
                            sliding_window=window, max_len=64)
    model = nh.Transformer(cfg, rngs=nnx.Rngs(2))
    model.set_attributes(implementation=implementation, block_size=8)
    a, _, c = nh.random_prompt_pairs(1, 3, prompt_len, length, 31)
    l2 = nh.prompt_pair_offsets(model, a, (a + 1) % 31, c).l2  # the prompts differ at every position
    t = np.arange(1, length + 1)
    for layer in range(1, cfg.n_layers + 1):
        reach = layer * (window - 1)
        assert (l2[:, layer, t > reach] == 0).all(), layer
        assert (l2[:, layer, t <= reach] > 0).all(), layer
