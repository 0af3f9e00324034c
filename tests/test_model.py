"""Tests of ``nohair_jax.model`` against a second, independent implementation.

``ref_forward`` (tests/reference_forward.py) is a plain numpy float64 forward pass written from
the documented semantics; it shares no code with the model.

The model is compared with it in float64 (``jax.enable_x64``) at ~1e-10 relative and in
float32 at a float32 tolerance, on hidden states, logits and what probes read inside (``Inside``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx, struct

import nohair_jax as nh
from nohair_jax.bound import BoundQuantities
from nohair_jax.sinks import FirstKeysShare
from nohair_jax.model import (
    Probe, Sublayers,
    CPU_ROW_CHUNK, MLP, PromptLogitBias, Transformer, TransformerConfig, for_measurement, merge_stacked_blocks,
    split_stacked_blocks,
)
from reference_forward import (
    Params, flat_leaves, unflatten, build, random_params, random_tokens, ref_forward, ref_gelu, ref_gelu_tanh, ref_rope, ref_silu,
    ref_sinusoidal,
)

class Inside(Probe):
    """What the tests compare with the reference inside the forward pass: both sublayers' outputs
    (``blocks``), the bound's quantities (``norms``; ``attention[0]``, max |logit| [L, B]) and, with
    ``prompt_len``, the attention on the prompt (``attention[1]`` [L, B, H, T]): the library's probes,
    read together."""

    prompt_len: int | None = struct.field(pytree_node=False, default=None)

    def read_block(self, attn, mlp):
        return attn, mlp

    def read_attention(self, logits, weights, reads):
        share = None if self.prompt_len is None else FirstKeysShare(keys=self.prompt_len).read_attention(logits, weights, reads)
        return BoundQuantities().read_attention(logits, weights, reads), share

    def read_norms(self, scales):
        return scales


class Read(NamedTuple):
    norm_scale: np.ndarray  # [n_norms, B, T]
    max_abs_logit: np.ndarray  # [L, B]
    prompt_attention: np.ndarray | None  # [L, B, H, T]


def inside(out) -> Read:
    """What ``Inside`` read, by name."""
    return Read(out.norms, *out.attention)


@functools.partial(jax.jit, static_argnums=(0, 3))
def _jit_forward(graphdef, state, tokens, probe):
    return nnx.merge(graphdef, state)(tokens, probe=probe)


def forward(model, tokens, *, prompt_len=None, probe=None):
    """The model's forward pass with ``probe`` (default ``Inside(prompt_len)``), jitted (split / merge
    inside ``jax.jit``); equality with the eager call is checked in ``test_jit_matches_eager``. Eager is
    ~3x slower to run here."""
    graphdef, state = nnx.split(model)
    return _jit_forward(graphdef, state, jnp.asarray(tokens), Inside(prompt_len=prompt_len) if probe is None else probe)


def _as_numpy(out):
    return jax.tree_util.tree_map(np.asarray, out)


def run_model(model, tokens, prompt_len):
    out = forward(model, tokens, prompt_len=prompt_len)
    d = inside(out)
    return dict(
        logits=np.asarray(out.logits),
        hidden=np.asarray(out.hidden),
        norm_scale=np.asarray(d.norm_scale),
        max_abs_logit=np.asarray(d.max_abs_logit),
        prompt_attention=None if d.prompt_attention is None else np.asarray(d.prompt_attention),
        attn=np.asarray(out.blocks[0]),
        mlp=np.asarray(out.blocks[1]),
        dtypes={k: str(v.dtype) for k, v in (("logits", out.logits), ("hidden", out.hidden))},
    )


def assert_close(got, want, rtol, what=""):
    """Elementwise rtol with an absolute floor of rtol * max|want| (for values near zero)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    scale = max(float(np.abs(want).max()), 1e-300)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * scale, err_msg=what)


def compare(got, want, rtol):
    for key in ("hidden", "logits", "norm_scale", "max_abs_logit", "prompt_attention", "attn", "mlp"):
        if want[key] is None:
            assert got[key] is None, key
            continue
        assert_close(got[key], want[key], rtol, key)


# --------------------------------------------------------------------------------------
# Configurations (small) and the float64 / float32 comparisons
# --------------------------------------------------------------------------------------

CASES = {
    # name: (config, batch, length, prompt_len passed to Inside)
    "gpt2_like": (
        TransformerConfig(
            vocab_size=13, d_model=16, n_heads=4, n_layers=2, mlp="gelu_tanh", norm="layernorm",
            position="learned", bias=True, tied_embeddings=True, max_len=12,
        ),
        2, 9, 3,
    ),
    "llama_like": (
        TransformerConfig(
            vocab_size=17, d_model=12, n_heads=3, n_kv_heads=1, n_layers=2, d_mlp=20, mlp="swiglu",
            norm="rmsnorm", position="rope", bias=False, tied_embeddings=False, max_len=8,
        ),
        2, 10, 4,  # rope has no length limit: T > max_len is allowed
    ),
    "qwen_like_qkv_bias_gqa2": (
        TransformerConfig(
            vocab_size=11, d_model=16, n_heads=4, n_kv_heads=2, n_layers=2, d_mlp=24, mlp="swiglu",
            norm="rmsnorm", position="rope", rope_theta=500.0, bias=False, qkv_bias=True,
            tied_embeddings=True, norm_eps=1e-6,
        ),
        2, 8, 2,
    ),
    "sinusoidal_postln_relu": (
        TransformerConfig(
            vocab_size=13, d_model=14, n_heads=2, n_layers=2, d_mlp=30, mlp="relu", norm="layernorm",
            norm_placement="post", position="sinusoidal", bias=True, tied_embeddings=False,
        ),
        2, 9, 3,
    ),
    "sinusoidal_postln_no_final_norm_odd_d": (
        TransformerConfig(
            vocab_size=9, d_model=15, n_heads=3, n_layers=2, d_mlp=10, mlp="gelu", norm="layernorm",
            norm_placement="post", final_norm=False, position="sinusoidal", bias=False,
        ),
        1, 7, None,
    ),
    "none_prompt_bias": (
        TransformerConfig(
            vocab_size=13, d_model=16, n_heads=4, n_layers=2, mlp="gelu", norm="layernorm",
            position="none", bias=True, prompt_logit_bias=PromptLogitBias(prompt_len=3, gamma=0.7),
        ),
        2, 10, 3,
    ),
    "odd_sizes": (
        TransformerConfig(
            vocab_size=19, d_model=24, n_heads=3, n_layers=3, d_mlp=36, mlp="gelu", norm="layernorm",
            position="learned", bias=True, tied_embeddings=True, max_len=16,
            prompt_logit_bias=PromptLogitBias(prompt_len=4, gamma=1.3),
        ),
        2, 11, 4,
    ),
    # The architecture contrasts (docs/contrasts.md): ALiBi on 6 heads (not a power of two: the
    # interleaved slopes), a window shorter than the sequence, QK-norm with RoPE and grouped heads.
    "alibi_window": (
        TransformerConfig(
            vocab_size=13, d_model=24, n_heads=6, n_layers=2, mlp="gelu", norm="layernorm",
            position="alibi", sliding_window=4, bias=True,
        ),
        2, 11, 3,
    ),
    # GPT-NeoX's parallel block with RoPE on a quarter of heads of 8 features in a 12-wide model (Qwen3's
    # head_width: not d_model / n_heads).
    "parallel_partial_rope_head_width": (
        TransformerConfig(
            vocab_size=13, d_model=12, n_heads=3, head_width=8, n_layers=2, d_mlp=20, mlp="gelu", norm="layernorm",
            position="rope", rotary_fraction=0.25, parallel_residual=True, bias=True, tied_embeddings=False,
        ),
        2, 9, 3,
    ),
    # Gemma 2 and 3: norms before and after each sublayer, GeGLU, a scaled embedding and logit scale,
    # soft caps low enough to bite (logits of a few units), a window on layers 0 and 2 only, and Gemma 3's
    # own RoPE base on those layers with QK-norm.
    "gemma2_like": (
        TransformerConfig(
            vocab_size=13, d_model=12, n_heads=3, n_kv_heads=1, head_width=6, n_layers=3, d_mlp=20, mlp="geglu",
            norm="rmsnorm", norm_placement="sandwich", position="rope", bias=False, embed_scale=12 ** 0.5,
            attn_scale=0.3, attn_softcap=2.0, final_softcap=3.0, sliding_window=3, window_layers=(0, 2),
        ),
        2, 9, 3,
    ),
    "gemma3_like": (
        TransformerConfig(
            vocab_size=13, d_model=12, n_heads=2, head_width=8, n_layers=3, d_mlp=20, mlp="geglu", norm="rmsnorm",
            norm_placement="sandwich", position="rope", rope_theta=1e4, local_rope_theta=10.0, bias=False,
            qk_norm=True, sliding_window=4, window_layers=(0, 1), embed_scale=2.0, attn_scale=0.5,
        ),
        2, 9, 3,
    ),
    # OLMo 2: norms on the sublayers' outputs only, QK-norm over the whole projection (grouped heads).
    "olmo2_like": (
        TransformerConfig(
            vocab_size=11, d_model=16, n_heads=4, n_kv_heads=2, n_layers=2, d_mlp=24, mlp="swiglu", norm="rmsnorm",
            norm_placement="output", position="rope", bias=False, qk_norm=True, qk_norm_scope="projection",
            tied_embeddings=False,
        ),
        2, 9, 2,
    ),
    "qk_norm_rope_gqa": (
        TransformerConfig(
            vocab_size=11, d_model=16, n_heads=4, n_kv_heads=2, n_layers=2, d_mlp=24, mlp="swiglu",
            norm="rmsnorm", position="rope", bias=False, qk_norm=True, sliding_window=5,
        ),
        2, 9, 2,
    ),
}


@functools.lru_cache(maxsize=None)
def case_data(name):
    """cfg, params, tokens, prompt_len, numpy reference output and the parameter reader."""
    cfg, batch, length, prompt_len = CASES[name]
    seed = sorted(CASES).index(name)
    params = random_params(cfg, seed)
    tokens = random_tokens(cfg, batch, length, seed + 100)
    reader = Params(params)
    want = ref_forward(cfg, reader, tokens, prompt_len)
    return dict(name=name, cfg=cfg, params=params, tokens=tokens, prompt_len=prompt_len, want=want, reader=reader)


@pytest.fixture(params=sorted(CASES))
def case(request):
    return case_data(request.param)


def test_reference_reads_every_parameter(case):
    """The reference consumed exactly the model's parameters: nothing ignored, layout as documented."""
    assert case["reader"].used == case["reader"].names


def test_parameter_count_from_the_config_alone(case):
    """``TransformerConfig.n_parameters`` (arithmetic on the config) against the built model's arrays."""
    model = Transformer(case["cfg"], rngs=nnx.Rngs(0))
    assert case["cfg"].n_parameters == sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))


def test_float64_matches_reference(case):
    """Model built as float64 (``dtype="float64"`` in the config) against the reference at 1e-10."""
    with jax.enable_x64(True):
        model = build(dataclasses.replace(case["cfg"], dtype="float64"), case["params"], jnp.float64)
        got = run_model(model, case["tokens"], case["prompt_len"])
    assert got["dtypes"] == {"logits": "float64", "hidden": "float64"}
    compare(got, case["want"], rtol=1e-10)


def test_float32_matches_reference(case):
    # Pin full float32 matmuls so the tolerance also holds on accelerators that default to TF32.
    with jax.default_matmul_precision("float32"):
        got = run_model(build(case["cfg"], case["params"], jnp.float32), case["tokens"], case["prompt_len"])
    assert got["dtypes"] == {"logits": "float32", "hidden": "float32"}
    compare(got, case["want"], rtol=2e-5)  # observed <= 5e-7


def test_mlp_in_row_chunks_matches_reference(case):
    """The MLPs a few positions at a time (equal chunks of the batch's rows and a shorter last one)
    against the reference at 1e-10, in float64: a chunk written back to the wrong rows or a
    dropped remainder would be off by O(1)."""
    rows = case["tokens"].size
    chunk = next(c for c in range(3, rows) if rows % -(-rows // -(-rows // c)))  # by_rows' size leaves a remainder
    with jax.enable_x64(True):
        model = build(dataclasses.replace(case["cfg"], dtype="float64"), case["params"], jnp.float64)
        model.set_attributes(MLP, row_chunk=chunk)
        compare(run_model(model, case["tokens"], case["prompt_len"]), case["want"], rtol=1e-10)


def test_only_measurements_chunk_the_mlp():
    """"auto" is all positions at once in a direct call (what training differentiates) and
    ``CPU_ROW_CHUNK`` at a time where ``for_measurement`` set it: one more loop in the program."""
    cfg, model = _small_model(position="rope")
    tokens = jnp.zeros((2, CPU_ROW_CHUNK // 2 + 8), jnp.int32)  # more rows than one chunk
    loops = lambda m: str(jax.make_jaxpr(lambda x: m(x).hidden)(tokens)).count("scan[")  # noqa: E731
    assert model.blocks[0].mlp.row_chunk == "auto" and loops(model) == 1  # the blocks' scan
    chunked = for_measurement(nnx.merge(*nnx.split(model)))
    assert chunked.blocks[0].mlp.row_chunk == (CPU_ROW_CHUNK if jax.default_backend() == "cpu" else None)
    assert loops(chunked) == (2 if jax.default_backend() == "cpu" else 1)
    np.testing.assert_allclose(np.asarray(chunked(tokens).hidden), np.asarray(model(tokens).hidden), rtol=1e-6, atol=1e-6)
    prompts, continuation = np.zeros((2, 1, 2), np.int32), np.zeros((1, 600), np.int32)
    nh.prompt_pair_offsets(model, *prompts, continuation)
    assert model.blocks[0].mlp.row_chunk == "auto"  # the engine chunks its own copy of the model


def test_reference_sanity(case):
    """Checks of the reference output itself and of the documented shapes (no model involved)."""
    cfg, want = case["cfg"], case["want"]
    batch, length = case["tokens"].shape
    assert want["hidden"].shape == (cfg.n_layers + 1, batch, length, cfg.d_model)
    assert want["logits"].shape == (batch, length, cfg.vocab_size)
    per_block = 4 if cfg.norm_placement == "sandwich" else 2  # norms before and after each sublayer
    assert want["norm_scale"].shape == (per_block * cfg.n_layers + int(cfg.final_norm), batch, length)
    assert want["max_abs_logit"].shape == (cfg.n_layers, batch)
    if case["prompt_len"] is not None:
        pa = want["prompt_attention"]
        assert pa.shape == (cfg.n_layers, batch, cfg.n_heads, length)
        # Queries inside the prompt attend only to the prompt.
        np.testing.assert_allclose(pa[..., : case["prompt_len"]], 1.0, rtol=0, atol=1e-12)
        assert (pa[..., case["prompt_len"] :] < 1.0).all()
    # Non-trivial parameters: attention is far from uniform somewhere.
    assert want["max_abs_logit"].max() > 1.0


# The measurement-near-the-floor path (docs/definitions.md#fits): a float32-built model whose state is
# cast to float64 (split, astype, merge inside enable_x64) must then compute in float64 throughout.
# Regression: with ``nnx.Embed`` the token / learned-position lookups, the sinusoidal table and the
# tied read-out stayed float32 (Embed freezes its dtype, static in the graphdef, at construction).


@pytest.mark.parametrize("name", ["gpt2_like", "sinusoidal_postln_relu"])  # tied + learned; sinusoidal + lm_head
def test_float64_cast_state_matches_reference(name):
    data = case_data(name)
    with jax.enable_x64(True):
        graphdef, state = nnx.split(build(data["cfg"], data["params"], jnp.float32))
        assert {str(x.dtype) for x in jax.tree_util.tree_leaves(state)} == {"float32"}
        state = jax.tree_util.tree_map(lambda x: x.astype(jnp.float64), state)
        got = run_model(nnx.merge(graphdef, state), data["tokens"], data["prompt_len"])
    assert got["dtypes"] == {"logits": "float64", "hidden": "float64"}
    compare(got, data["want"], rtol=1e-10)


# --------------------------------------------------------------------------------------
# The reference's own conventions against closed forms (no model involved)
# --------------------------------------------------------------------------------------


def test_ref_sinusoidal_closed_form():
    """D = 6 written out: (sin, cos) pairs at frequencies 1, 10000^(-1/3), 10000^(-2/3)."""
    pos = np.arange(5)[:, None]
    freq = np.array([1.0, 10000.0 ** (-1 / 3), 10000.0 ** (-2 / 3)])
    table = np.stack([np.sin(pos * freq), np.cos(pos * freq)], axis=-1).reshape(5, 6)
    np.testing.assert_allclose(ref_sinusoidal(5, 6), table, rtol=1e-14, atol=1e-15)
    # odd D: the last feature is a sin at frequency 10000^(-(D-1)/D)
    np.testing.assert_allclose(ref_sinusoidal(4, 5)[:, 4], np.sin(np.arange(4) * 10000.0 ** (-4 / 5)), rtol=1e-14)


def test_ref_rope_closed_form():
    """Half-split rope: features (i, i + hd/2) rotate as a pair by angle pos * theta^(-2i/hd),
    so that <rope(q)[m], rope(k)[n]> depends only on m - n."""
    rng = np.random.default_rng(0)
    theta, length, hd = 50.0, 6, 4
    x = rng.standard_normal((length, hd))
    got = ref_rope(x, theta)
    for pos in range(length):
        for i in range(hd // 2):
            a = pos * theta ** (-2 * i / hd)
            x1, x2 = x[pos, i], x[pos, i + hd // 2]
            np.testing.assert_allclose(got[pos, i], x1 * math.cos(a) - x2 * math.sin(a), rtol=1e-13, atol=1e-14)
            np.testing.assert_allclose(got[pos, i + hd // 2], x2 * math.cos(a) + x1 * math.sin(a), rtol=1e-13, atol=1e-14)
    q, k = rng.standard_normal(hd), rng.standard_normal(hd)
    rq, rk = ref_rope(np.tile(q, (length, 1)), theta), ref_rope(np.tile(k, (length, 1)), theta)
    np.testing.assert_allclose(rq[4] @ rk[2], rq[3] @ rk[1], rtol=1e-12)
    np.testing.assert_allclose(rq[0] @ rk[0], q @ k, rtol=1e-12)


def test_ref_activations_known_values():
    np.testing.assert_allclose(ref_gelu(np.array([1.0, -1.0, 0.0])), [0.8413447460685429, -0.15865525393145707, 0.0], rtol=1e-14)
    np.testing.assert_allclose(ref_gelu_tanh(np.array([1.0])), [0.8411919906082768], rtol=1e-12)
    np.testing.assert_allclose(ref_silu(np.array([1.0, 0.0])), [1.0 / (1.0 + math.exp(-1.0)), 0.0], rtol=1e-14)


# --------------------------------------------------------------------------------------
# The model against closed forms
# --------------------------------------------------------------------------------------


def _zero_qk(params):
    """Copy of params with every q and k kernel (and bias) zeroed: all attention logits are 0."""
    flat = flat_leaves(params)
    return unflatten({p: (np.zeros_like(v) if p[-2] in ("q", "k") else v) for p, v in flat.items()})


def test_prompt_bias_uniform_logits_share_is_i_over_2i_minus_p():
    """docs/definitions.md#logit-bias: with all logits zero and gamma = 1, a
    query at 1-based i > P puts
    i / (2i - P) of its attention on the prompt (1 for i <= P); the bias is not in max |logit|."""
    prompt_len, length = 3, 12
    cfg = TransformerConfig(
        vocab_size=7, d_model=8, n_heads=2, n_layers=1, d_mlp=8, position="none", bias=False, dtype="float64",
        prompt_logit_bias=PromptLogitBias(prompt_len=prompt_len, gamma=1.0),
    )
    params = _zero_qk(random_params(cfg, seed=7))
    with jax.enable_x64(True):
        out = _as_numpy(forward(build(cfg, params, jnp.float64), random_tokens(cfg, 2, length, 8), prompt_len=prompt_len))
    i = np.arange(1, length + 1, dtype=np.float64)
    want = np.where(i > prompt_len, i / (2 * i - prompt_len), 1.0)
    pa = inside(out).prompt_attention
    np.testing.assert_allclose(pa, np.broadcast_to(want, pa.shape), rtol=1e-12)
    np.testing.assert_array_equal(inside(out).max_abs_logit, 0.0)


def test_zero_logits_without_bias_dilute_as_p_over_i():
    """Without the bias, uniform attention gives the prompt P / i at 1-based query i > P."""
    prompt_len, length = 2, 9
    cfg = TransformerConfig(
        vocab_size=7, d_model=8, n_heads=2, n_layers=1, d_mlp=8, position="rope", norm="rmsnorm", dtype="float64"
    )
    params = _zero_qk(random_params(cfg, seed=9))
    with jax.enable_x64(True):
        out = _as_numpy(forward(build(cfg, params, jnp.float64), random_tokens(cfg, 2, length, 10), prompt_len=prompt_len))
    i = np.arange(1, length + 1, dtype=np.float64)
    pa = inside(out).prompt_attention
    np.testing.assert_allclose(pa, np.broadcast_to(np.minimum(prompt_len / i, 1.0), pa.shape), rtol=1e-12)


# --------------------------------------------------------------------------------------
# Probes, jit, batch independence, causality
# --------------------------------------------------------------------------------------


def _small_model(seed=21, **overrides):
    kw = dict(vocab_size=13, d_model=16, n_heads=4, n_kv_heads=2, n_layers=2, d_mlp=24, position="learned", max_len=10)
    kw.update(overrides)
    cfg = TransformerConfig(**kw)
    return cfg, build(cfg, random_params(cfg, seed), jnp.float32)


def test_jit_matches_eager_and_probes_leave_the_forward_pass_as_it_is():
    cfg, model = _small_model(position="rope", prompt_logit_bias=PromptLogitBias(prompt_len=3, gamma=1.0))
    tokens = jnp.asarray(random_tokens(cfg, 2, 9, seed=23))
    eager = _as_numpy(model(tokens, probe=Inside(prompt_len=3)))

    @nnx.jit(static_argnames=("prompt_len",))
    def nnx_forward(m, t, prompt_len):
        return m(t, probe=Inside(prompt_len=prompt_len))

    graphdef, state = nnx.split(model)

    @jax.jit
    def pure_forward(state, t):
        return nnx.merge(graphdef, state)(t, probe=Inside(prompt_len=3))

    for jitted in (_as_numpy(nnx_forward(model, tokens, 3)), _as_numpy(pure_forward(state, tokens))):
        assert jax.tree_util.tree_structure(jitted) == jax.tree_util.tree_structure(eager)
        for got, want in zip(jax.tree_util.tree_leaves(jitted), jax.tree_util.tree_leaves(eager)):
            assert got.shape == want.shape and got.dtype == want.dtype
            assert_close(got, want, rtol=1e-5)
    # A pure function of (parameters, tokens): a second call agrees exactly.
    again = np.asarray(pure_forward(state, tokens).logits)
    np.testing.assert_array_equal(np.asarray(pure_forward(state, tokens).logits), again)
    assert np.isfinite(again).all()

    # Probes (eager): none -> nothing read; without prompt_len -> no prompt attention; the forward
    # pass itself does not depend on them.
    plain = _as_numpy(model(tokens))
    assert plain.blocks is None and plain.attention is None and plain.norms is None
    np.testing.assert_array_equal(_as_numpy(model(tokens, probe=Sublayers())).hidden, plain.hidden)
    no_prompt = inside(_as_numpy(model(tokens, probe=Inside())))
    assert no_prompt.prompt_attention is None
    assert no_prompt.norm_scale.shape == (cfg.n_norms, 2, 9)
    assert no_prompt.max_abs_logit.shape == (cfg.n_layers, 2)
    np.testing.assert_array_equal(plain.logits, eager.logits)
    np.testing.assert_array_equal(plain.hidden, eager.hidden)
    np.testing.assert_array_equal(no_prompt.norm_scale, inside(eager).norm_scale)
    np.testing.assert_array_equal(no_prompt.max_abs_logit, inside(eager).max_abs_logit)


def test_batch_rows_are_independent_and_causal():
    """Row 0 of a batch of 3 equals the same sequence run alone; row 1 is row 0 with only the
    last token changed, so every earlier position must agree with row 0 (causality)."""
    cfg, model = _small_model(position="learned", prompt_logit_bias=PromptLogitBias(prompt_len=2))
    tokens = random_tokens(cfg, 3, 8, seed=24)
    tokens[1] = tokens[0]
    tokens[1, -1] = (tokens[0, -1] + 1) % cfg.vocab_size
    batch = _as_numpy(forward(model, tokens, prompt_len=2))
    alone = _as_numpy(forward(model, tokens[:1], prompt_len=2))
    assert_close(batch.logits[:1], alone.logits, 2e-5, "logits")
    assert_close(batch.hidden[:, :1], alone.hidden, 2e-5, "hidden")
    d, a = inside(batch), inside(alone)
    assert_close(d.norm_scale[:, :1], a.norm_scale, 2e-5, "norm_scale")
    assert_close(d.max_abs_logit[:, :1], a.max_abs_logit, 2e-5, "max_abs_logit")
    assert_close(d.prompt_attention[:, :1], a.prompt_attention, 2e-5, "prompt_attention")
    # rows 0 and 2 hold different tokens, so the check is not vacuous
    assert not np.allclose(batch.logits[0], batch.logits[2])

    # causality: the future (last) token does not reach earlier positions
    assert_close(batch.hidden[:, 1, :-1], batch.hidden[:, 0, :-1], 1e-6, "hidden, causal")
    assert_close(batch.logits[1, :-1], batch.logits[0, :-1], 1e-6, "logits, causal")
    assert_close(d.norm_scale[:, 1, :-1], d.norm_scale[:, 0, :-1], 1e-6, "norm_scale, causal")
    assert_close(d.prompt_attention[:, 1, :, :-1], d.prompt_attention[:, 0, :, :-1], 1e-6, "prompt_attention, causal")
    assert not np.allclose(batch.logits[1, -1], batch.logits[0, -1])


# --------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------


def _cfg(**kw):
    base = dict(vocab_size=7, d_model=16, n_heads=4, n_layers=1)
    base.update(kw)
    return TransformerConfig(**base)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(d_model=30, n_heads=4), r"d_model=30\b"),
        (dict(mlp="reglu"), r"reglu"),
        (dict(norm="batchnorm"), r"batchnorm"),
        (dict(norm_placement="middle"), r"middle"),
        (dict(position="xpos"), r"xpos"),
        (dict(sliding_window=0), r"sliding_window.*\b0\b"),
        (dict(sliding_window=2.5), r"sliding_window.*2\.5"),
        (dict(qk_norm=1), r"qk_norm.*\b1\b"),
        (dict(dtype="int8"), r"int8"),
        (dict(n_heads=4, n_kv_heads=3), r"n_kv_heads=3\b"),
        (dict(d_model=20, n_heads=4, position="rope"), r"\b5\b"),  # head dim 5
        (dict(n_layers=0), r"n_layers.*\b0\b"),
        (dict(vocab_size=-2), r"-2"),
        (dict(rotary_fraction=0.0), r"rotary_fraction.*\b0\.0\b"),
        (dict(d_model=16, n_heads=4, position="rope", rotary_fraction=0.75), r"rotated features, got 3"),
        (dict(parallel_residual=True, norm_placement="post"), r"parallel_residual needs the norms before or after the sublayers"),
        (dict(head_width=0), r"head_width.*\b0\b"),
    ],
)
def test_config_validation_names_bad_value(kwargs, match):
    with pytest.raises(ValueError, match=match):
        _cfg(**kwargs)


def test_config_valid_edge_cases_accepted():
    _cfg(d_model=20, n_heads=4, position="learned")  # odd head dim is fine without rope
    _cfg(d_model=16, n_heads=4, n_kv_heads=1, position="rope")
    cfg = _cfg(prompt_logit_bias=dict(prompt_len=2, gamma=0.5))  # from JSON
    assert cfg.prompt_logit_bias == PromptLogitBias(prompt_len=2, gamma=0.5)


@pytest.mark.parametrize(
    "kwargs, match",
    [(dict(prompt_len=0), r"\b0\b"), (dict(prompt_len=2.0), r"2\.0"), (dict(prompt_len=2, gamma=float("nan")), r"nan")],
)
def test_prompt_logit_bias_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PromptLogitBias(**kwargs)


@pytest.mark.parametrize("n_kv_heads", [0, -2])
def test_config_rejects_nonpositive_kv_heads(n_kv_heads):
    with pytest.raises(ValueError, match=str(n_kv_heads)):
        _cfg(n_heads=4, n_kv_heads=n_kv_heads)


@pytest.mark.parametrize("d_mlp", [0, -3])
def test_config_rejects_nonpositive_d_mlp(d_mlp):
    with pytest.raises(ValueError, match=str(d_mlp)):
        _cfg(d_mlp=d_mlp)


@pytest.mark.parametrize(
    "kwargs, match",
    [(dict(norm_eps=-1.0), r"norm_eps.*-1\.0"), (dict(rope_theta=0.0), r"rope_theta.*0\.0"), (dict(n_layers=True), r"n_layers.*True")],
)
def test_config_rejects_bad_numbers(kwargs, match):
    with pytest.raises(ValueError, match=match):
        _cfg(**kwargs)


def test_bfloat16_sinusoidal_positions_are_accurate():
    """h_0 with zero token embeddings is the position table; in bfloat16 it should be the exact
    table rounded to bfloat16 (error <= 2^-8 for values in [-1, 1]), with distinct positions distinct."""
    length = 300
    cfg = TransformerConfig(vocab_size=3, d_model=8, n_heads=2, n_layers=1, d_mlp=4, position="sinusoidal", dtype="bfloat16")
    params = random_params(cfg, seed=29)
    params["embed"]["embedding"] = np.zeros_like(params["embed"]["embedding"])
    out = forward(build(cfg, params, jnp.bfloat16), np.zeros((1, length), np.int32), probe=Probe())
    h0 = np.asarray(out.hidden[0, 0].astype(jnp.float32), np.float64)
    assert not np.array_equal(h0[256], h0[257])
    np.testing.assert_allclose(h0, ref_sinusoidal(length, cfg.d_model), rtol=0, atol=2.0**-8)


def test_learned_positions_longer_than_max_len_raise():
    cfg = _cfg(position="learned", max_len=6)
    model = build(cfg, random_params(cfg, seed=26), jnp.float32)
    nnx.eval_shape(lambda m, t: m(t), model, jnp.zeros((1, 6), jnp.int32))  # exactly max_len is fine
    with pytest.raises(ValueError, match=r"\b7\b.*max_len=6"):
        model(jnp.zeros((1, 7), jnp.int32))
    with pytest.raises(ValueError, match=r"\b7\b.*max_len=6"):
        forward(model, np.zeros((1, 7), np.int32))  # also at trace time under jit
    # other position kinds have no table to run out of
    for position in ("sinusoidal", "rope", "none"):
        cfg = _cfg(position=position, max_len=6)
        out = nnx.eval_shape(lambda m, t: m(t), build(cfg, random_params(cfg, 27), jnp.float32), jnp.zeros((1, 7), jnp.int32))
        assert out.logits.shape == (1, 7, cfg.vocab_size)


def test_tokens_must_be_2d():
    cfg = _cfg()
    model = build(cfg, random_params(cfg, seed=28), jnp.float32)
    with pytest.raises(ValueError, match=r"\(5,\)"):
        model(jnp.zeros((5,), jnp.int32))


def test_build_installs_the_drawn_parameters():
    """The helpers really install the drawn parameters (guards every comparison above)."""
    cfg = CASES["llama_like"][0]
    params = random_params(cfg, seed=3)
    model = build(cfg, params, jnp.float32)
    back, want = Params(nnx.to_pure_dict(nnx.split(model)[1])), Params(params)
    assert back.names == want.names
    for name in want.names:
        np.testing.assert_array_equal(back(name), want(name), err_msg=name)
    assert dataclasses.asdict(model.config) == dataclasses.asdict(cfg)
    # nothing left at its trivial init
    for name in want.names:
        value = want(name)
        assert not np.allclose(value, 0.0) and not np.allclose(value, 1.0), name


@pytest.mark.parametrize("per_layer", [{}, dict(position="rope", sliding_window=3, window_layers=(0,),
                                                 local_rope_theta=100.0, norm_placement="sandwich")])
def test_blocks_are_traced_once_whatever_the_depth(per_layer):
    """The blocks run as one scanned step: the traced program (and so compile time) does not grow
    with depth. Unrolled, 6 layers would hold three times the matrix products of 2. Gemma 3's settings
    per layer (a window on some layers, their own RoPE) are arrays scanned with the blocks."""
    counts = []
    for depth in (2, 6):
        model = Transformer(TransformerConfig(vocab_size=16, d_model=16, n_heads=2, n_layers=depth, max_len=8,
                                              **per_layer), rngs=nnx.Rngs(0))
        graphdef, state = nnx.split(model)
        jaxpr = jax.make_jaxpr(lambda s, x: nnx.merge(graphdef, s)(x).logits)(state, jnp.zeros((1, 8), jnp.int32))
        counts.append(str(jaxpr).count("dot_general"))
    assert counts[0] == counts[1] > 0


def test_stacked_blocks_give_the_same_model():
    """``split_stacked_blocks`` then ``merge_stacked_blocks`` (what the per-pair engine jits) is the
    same model: block l gets layer l's parameters (a shuffled stack would change every output),
    and the forward pass is bit-identical, jitted, to the model's own."""
    cfg, model = _small_model(position="rope", n_layers=3)
    tokens = jnp.asarray(random_tokens(cfg, 2, 9, seed=7))
    graphdef, rest, blocks = split_stacked_blocks(model)
    kernel = blocks["attn"]["q"]["kernel"][...]
    assert kernel.shape == (3, cfg.d_model, cfg.n_heads * cfg.head_dim)
    np.testing.assert_array_equal(kernel[2], model.blocks[2].attn.q.kernel[...])
    want = jax.jit(lambda s, x: nnx.merge(*s)(x).hidden)(nnx.split(model), tokens)
    got = jax.jit(lambda r, b, x: merge_stacked_blocks(graphdef, r, b)(x).hidden)(rest, blocks, tokens)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    shuffled = jax.tree.map(lambda x: x[::-1], blocks)
    assert not np.array_equal(np.asarray(merge_stacked_blocks(graphdef, rest, shuffled)(tokens).hidden), np.asarray(want))


class _NormsAndLast(Probe):
    def read(self, x):  # a pytree of two arrays
        return jnp.linalg.norm(x, axis=-1), x[:, -1]


def test_a_probes_read_is_each_layers_stream_read_as_it_is_computed():
    """A probe's ``read`` gives f of every h_l, l = 0..L, stacked: what f of the full stack gives."""
    cfg, model = _small_model(position="rope", n_layers=3)
    tokens = jnp.asarray(random_tokens(cfg, 2, 9, seed=5))
    full = model(tokens)
    got = model(tokens, probe=_NormsAndLast())
    norms, last = got.hidden
    assert norms.shape == (4, 2, 9) and last.shape == (4, 2, cfg.d_model)
    np.testing.assert_allclose(norms, np.linalg.norm(np.asarray(full.hidden, np.float64), axis=-1), rtol=1e-6)
    np.testing.assert_array_equal(last, full.hidden[:, :, -1])
    np.testing.assert_array_equal(got.logits, full.logits)


@pytest.mark.parametrize("scaled", [True, False])
def test_initialisation_std_of_every_weight_matrix(make_tiny, scaled):
    """``init_std`` for every weight matrix; the projections into the residual stream divided by
    sqrt(2 n_layers) only with GPT-2's ``scaled_residual_init`` (transformers' Llama init: not)."""
    model = make_tiny(init_std=0.1, scaled_residual_init=scaled, d_model=64, d_mlp=256)
    block = model.blocks[0]
    out = 0.1 / math.sqrt(2 * 3) if scaled else 0.1
    for kernel, std in ((block.attn.q.kernel, 0.1), (block.mlp.up.kernel, 0.1), (block.attn.o.kernel, out),
                        (block.mlp.down.kernel, out)):
        assert np.std(np.asarray(kernel[...])) == pytest.approx(std, rel=0.05)


def test_the_real_model_at_init_uses_its_authors_stated_initialisation():
    from nohair_jax.checkpoints import PACKAGED_MODELS

    cfg = nh.TransformerConfig(vocab_size=64, d_model=32, n_heads=4, n_layers=3, max_len=64)
    init = PACKAGED_MODELS["smollm2-135m"].initial_config(cfg)
    assert init.init_std == pytest.approx(1 / 24) and init.scaled_residual_init is False
    assert dataclasses.replace(init, init_std=cfg.init_std, scaled_residual_init=True) == cfg  # nothing else changed


@pytest.mark.parametrize("layout", [
    dict(position="learned", tied_embeddings=False),
    dict(position="rope", norm="rmsnorm", norm_placement="sandwich", qk_norm=True, sliding_window=8,
         window_layers=(0, 2), local_rope_theta=10.0, embed_scale=4.0),
    dict(position="rope", rotary_fraction=0.25, parallel_residual=True, final_norm=False),
], ids=["learned_untied", "gemma3_like", "neox_like"])
def test_model_skeleton_is_the_whole_models_shape(layout):
    """``model_skeleton`` traces one block, copied, into a one-block model: the same graphdef and the
    same shapes and dtypes as the whole model traced at once, for layouts whose non-block parts differ."""
    from nohair_jax.model import model_skeleton

    cfg = nh.TransformerConfig(vocab_size=50, d_model=16, n_heads=2, n_layers=3, max_len=32, **layout)
    graphdef, state = model_skeleton(cfg)
    want_graphdef, want_state = nnx.split(nnx.eval_shape(lambda: nh.Transformer(cfg, rngs=nnx.Rngs(0))))
    assert graphdef == want_graphdef
    shapes = lambda s: jax.tree.map(lambda x: (x.shape, x.dtype), s)  # noqa: E731
    assert jax.tree_util.tree_structure(state) == jax.tree_util.tree_structure(want_state)
    assert shapes(state) == shapes(want_state)
    assert nnx.merge(graphdef, state).config == cfg
