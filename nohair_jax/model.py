"""A GPT-style causal decoder in Flax NNX whose inside can be read.

One file, top to bottom: config, norm, attention, MLP, block, transformer. The forward
pass returns the residual stream ``h_0 .. h_L`` next to the logits and, on request, the
quantities the no-hair bound is stated in (DESIGN.md section 3): the scale of every norm's
input, the largest attention logit per layer and the attention the prompt receives.
Nothing is stored on the modules: intermediates are return values, so a call is a pure
function of (parameters, tokens) and jits as one program.

Parameter layout (what checkpoint import and independent re-implementations rely on):
``embed.embedding [V, D]``, ``pos_embed.embedding [max_len, D]`` (learned positions only),
``blocks[l].{attn_norm, mlp_norm}.{scale, bias}``, ``blocks[l].attn.{q, k, v, o}.{kernel, bias}``
with kernels stored (in, out), ``blocks[l].mlp.{up, gate, down}.{kernel, bias}`` (``gate`` for
swiglu only), ``final_norm.{scale, bias}``, ``lm_head.kernel [D, V]`` (untied only).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from nohair_jax.attention import DEFAULT_BLOCK, blockwise_attention, plain_attention, position_dtype, use_blockwise

MLP_KINDS = ("gelu", "gelu_tanh", "relu", "swiglu")
NORM_KINDS = ("layernorm", "rmsnorm")
NORM_PLACEMENTS = ("pre", "post")
POSITION_KINDS = ("learned", "sinusoidal", "rope", "none")
ROPE_SCALING_KINDS = ("linear", "llama3")


@dataclasses.dataclass(frozen=True)
class PromptLogitBias:
    """The dilution-cancelling logit bias (DESIGN.md section 4).

    A query at absolute position ``i > prompt_len`` (1-based) gets ``gamma * log(i / prompt_len)``
    added to its attention logits on the prompt keys ``j <= prompt_len``. With uniform logits
    the prompt's share of attention becomes ``i / (2i - P)`` at ``gamma = 1``, which tends to 1/2
    instead of 0.
    """

    prompt_len: int
    gamma: float = 1.0

    def __post_init__(self):
        if not (isinstance(self.prompt_len, int) and not isinstance(self.prompt_len, bool) and self.prompt_len >= 1):
            raise ValueError(f"PromptLogitBias.prompt_len must be an int >= 1, got {self.prompt_len!r}")
        if not math.isfinite(self.gamma):
            raise ValueError(f"PromptLogitBias.gamma must be finite, got {self.gamma!r}")


@dataclasses.dataclass(frozen=True)
class RopeScaling:
    """RoPE frequency scaling, as Hugging Face's ``rope_scaling`` (``rope_parameters``) types.

    ``linear``: every inverse frequency divided by ``factor`` (position interpolation).
    ``llama3``: Llama 3.1's rule on wavelengths ``2 pi / inv_freq``: those shorter than
    ``original_max_len / high_freq_factor`` are kept, those longer than
    ``original_max_len / low_freq_factor`` are divided by ``factor``, and in between the inverse
    frequency is interpolated linearly in ``original_max_len / wavelength``.
    """

    kind: str
    factor: float
    low_freq_factor: float = 1.0  # llama3 only
    high_freq_factor: float = 4.0  # llama3 only
    original_max_len: int = 8192  # llama3 only: the context the model was pretrained at

    def __post_init__(self):
        if self.kind not in ROPE_SCALING_KINDS:
            raise ValueError(f"RopeScaling.kind={self.kind!r} is not one of {ROPE_SCALING_KINDS}")
        for name in ("factor", "low_freq_factor", "high_freq_factor", "original_max_len"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0):
                raise ValueError(f"RopeScaling.{name} must be a finite number > 0, got {value!r}")
        if self.kind == "llama3" and not self.high_freq_factor > self.low_freq_factor:
            raise ValueError(
                f"RopeScaling needs high_freq_factor > low_freq_factor, got {self.high_freq_factor} "
                f"and {self.low_freq_factor}"
            )


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Architecture of a causal decoder; expresses GPT-2 and Llama-family models.

    GPT-2: ``mlp="gelu_tanh", norm="layernorm", position="learned", bias=True, tied_embeddings=True``.
    Llama: ``mlp="swiglu", norm="rmsnorm", position="rope", bias=False, n_kv_heads < n_heads``.
    """

    vocab_size: int = 256
    d_model: int = 128
    n_heads: int = 4
    n_kv_heads: int | None = None  # None: as many as n_heads (no grouped-query attention)
    n_layers: int = 4
    d_mlp: int | None = None  # None: 4 * d_model
    mlp: str = "gelu"
    norm: str = "layernorm"
    norm_placement: str = "pre"
    norm_eps: float = 1e-5
    final_norm: bool = True
    position: str = "learned"
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling | None = None  # None: plain RoPE
    max_len: int = 1024
    tied_embeddings: bool = True
    bias: bool = True  # biases of the linear layers and of LayerNorm
    qkv_bias: bool | None = None  # None: same as `bias` (Qwen2 has bias=False, qkv_bias=True)
    dtype: str = "float32"  # parameter dtype; the forward computes in the parameters' dtype
    init_std: float = 0.02
    prompt_logit_bias: PromptLogitBias | None = None

    def __post_init__(self):
        for name in ("vocab_size", "d_model", "n_heads", "n_kv_heads", "n_layers", "d_mlp", "max_len"):
            value = getattr(self, name)
            if value is None and name in ("n_kv_heads", "d_mlp"):
                continue
            if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
                raise ValueError(f"TransformerConfig.{name} must be an int >= 1, got {value!r}")
        for name in ("norm_eps", "rope_theta", "init_std"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"TransformerConfig.{name} must be a finite number > 0, got {value!r}")
        for name, value, allowed in (
            ("mlp", self.mlp, MLP_KINDS),
            ("norm", self.norm, NORM_KINDS),
            ("norm_placement", self.norm_placement, NORM_PLACEMENTS),
            ("position", self.position, POSITION_KINDS),
            ("dtype", self.dtype, ("float32", "float64", "bfloat16", "float16")),
        ):
            if value not in allowed:
                raise ValueError(f"TransformerConfig.{name}={value!r} is not one of {allowed}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if self.n_heads % self.kv_heads:
            raise ValueError(f"n_heads={self.n_heads} is not divisible by n_kv_heads={self.kv_heads}")
        if self.position == "rope" and self.head_dim % 2:
            raise ValueError(f"rope needs an even head dimension, got {self.head_dim}")
        if isinstance(self.prompt_logit_bias, dict):  # from JSON
            object.__setattr__(self, "prompt_logit_bias", PromptLogitBias(**self.prompt_logit_bias))
        if isinstance(self.rope_scaling, dict):  # from JSON
            object.__setattr__(self, "rope_scaling", RopeScaling(**self.rope_scaling))

    @property
    def kv_heads(self) -> int:
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def mlp_width(self) -> int:
        return 4 * self.d_model if self.d_mlp is None else self.d_mlp

    @property
    def n_norms(self) -> int:
        """Norms in forward order: (attention, MLP) per block, then the final norm if any."""
        return 2 * self.n_layers + int(self.final_norm)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class Diagnostics(NamedTuple):
    """What the bound needs from inside the forward pass (DESIGN.md section 3).

    norm_scale:       [n_norms, B, T] the standard deviation (layernorm) or root mean square
                      (rmsnorm) of each norm's input, eps excluded; its minimum is ``sigma_min``.
    max_abs_logit:    [L, B] the largest |q.k / sqrt(head_dim)| over heads and causal (query, key)
                      pairs, before the prompt logit bias; its maximum is ``B`` of the bound.
    prompt_attention: [L, B, H, T] attention weight each query puts on the first ``prompt_len``
                      keys, or None when no prompt length was given.
    """

    norm_scale: jax.Array
    max_abs_logit: jax.Array
    prompt_attention: jax.Array | None


class ForwardOutput(NamedTuple):
    """logits [B, T, vocab]; hidden [L+1, B, T, D] with hidden[0] the embedding output and
    hidden[l] the residual stream after block l, before any final norm; diagnostics or None."""

    logits: jax.Array
    hidden: jax.Array
    diagnostics: Diagnostics | None


class Norm(nnx.Module):
    """LayerNorm or RMSNorm over the last axis that also returns its input's scale."""

    def __init__(self, cfg: TransformerConfig):
        self.kind, self.eps = cfg.norm, cfg.norm_eps
        self.scale = nnx.Param(jnp.ones(cfg.d_model, cfg.dtype))
        self.bias = nnx.Param(jnp.zeros(cfg.d_model, cfg.dtype)) if cfg.bias and cfg.norm == "layernorm" else None

    def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        """x [..., D] -> (normalised x [..., D], input scale [...])."""
        if self.kind == "layernorm":
            x = x - x.mean(-1, keepdims=True)
        mean_square = jnp.mean(x * x, axis=-1)
        y = x * jax.lax.rsqrt(mean_square + self.eps)[..., None] * self.scale[...]
        if self.bias is not None:
            y = y + self.bias[...]
        return y, jnp.sqrt(mean_square)


class Embedding(nnx.Module):
    """A table of vectors, read by index; computes in the table's own dtype (nnx.Embed would cast
    to its construction dtype, which breaks float64 measurements of a float32 model)."""

    def __init__(self, count: int, cfg: TransformerConfig, *, rngs: nnx.Rngs):
        self.embedding = nnx.Param(nnx.initializers.normal(cfg.init_std)(rngs.params(), (count, cfg.d_model), cfg.dtype))

    def __call__(self, ids: jax.Array) -> jax.Array:
        """ids int [...] -> [..., D]."""
        return jnp.take(self.embedding[...], ids, axis=0)

    def attend(self, x: jax.Array) -> jax.Array:
        """x [..., D] -> [..., count]: logits against every row (tied output embedding)."""
        return x @ self.embedding[...].T


def scale_rope_frequencies(inv_freq: jax.Array, scaling: RopeScaling) -> jax.Array:
    """inv_freq [head_dim / 2] -> the same frequencies under ``scaling`` (see ``RopeScaling``)."""
    if scaling.kind == "linear":
        return inv_freq / scaling.factor
    wavelength = 2 * math.pi / inv_freq
    smooth = (scaling.original_max_len / wavelength - scaling.low_freq_factor) / (
        scaling.high_freq_factor - scaling.low_freq_factor
    )
    interpolated = (1 - smooth) * inv_freq / scaling.factor + smooth * inv_freq
    long_waves = wavelength > scaling.original_max_len / scaling.low_freq_factor
    short_waves = wavelength < scaling.original_max_len / scaling.high_freq_factor
    return jnp.where(long_waves, inv_freq / scaling.factor, jnp.where(short_waves, inv_freq, interpolated))


def rope_tables(
    length: int, head_dim: int, theta: float, dtype, scaling: RopeScaling | None = None
) -> tuple[jax.Array, jax.Array]:
    """cos, sin [length, head_dim] in the half-split (Llama / Hugging Face) convention."""
    work = position_dtype(dtype)
    inv_freq = 1.0 / theta ** (jnp.arange(0, head_dim, 2, dtype=work) / head_dim)
    if scaling is not None:
        inv_freq = scale_rope_frequencies(inv_freq, scaling)
    angles = jnp.arange(length, dtype=work)[:, None] * inv_freq[None, :]
    angles = jnp.concatenate([angles, angles], axis=-1)
    return jnp.cos(angles).astype(dtype), jnp.sin(angles).astype(dtype)


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """x [B, T, heads, head_dim] rotated by position; cos, sin [T, head_dim]."""
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]


def sinusoidal_positions(length: int, d_model: int, dtype) -> jax.Array:
    """The fixed encoding of Vaswani et al.: [length, d_model], sin on even, cos on odd features."""
    work = position_dtype(dtype)
    position = jnp.arange(length, dtype=work)[:, None]
    freq = 1.0 / 10000.0 ** (jnp.arange(0, d_model, 2, dtype=work) / d_model)
    table = jnp.zeros((length, d_model), work)
    table = table.at[:, 0::2].set(jnp.sin(position * freq))
    return table.at[:, 1::2].set(jnp.cos(position * freq[: d_model // 2])).astype(dtype)


class Attention(nnx.Module):
    """Causal multi-head attention with grouped-query heads (head h reads key/value head h // group).

    Two paths, equal to float rounding (``nohair_jax.attention``): plain materialises the
    [B, H, T, T] weights, blockwise runs an online softmax over ``block_size`` tiles in O(T) memory.
    ``implementation`` "auto" takes blockwise from ``attention.BLOCKWISE_FROM`` positions on when
    no diagnostics are asked for (they read the full weights); force either for a whole model
    with ``model.set_attributes(implementation="plain")`` (or "blockwise", ``block_size=...``).
    """

    def __init__(self, cfg: TransformerConfig, *, rngs: nnx.Rngs):
        self.cfg = cfg
        self.implementation = "auto"
        self.block_size = DEFAULT_BLOCK
        init = nnx.initializers.normal(cfg.init_std)
        # GPT-2's scaling of the projections that write into the residual stream.
        out_init = nnx.initializers.normal(cfg.init_std / math.sqrt(2 * cfg.n_layers))
        qkv_bias = cfg.bias if cfg.qkv_bias is None else cfg.qkv_bias
        d, hd = cfg.d_model, cfg.head_dim
        linear = dict(param_dtype=cfg.dtype, rngs=rngs)
        self.q = nnx.Linear(d, cfg.n_heads * hd, use_bias=qkv_bias, kernel_init=init, **linear)
        self.k = nnx.Linear(d, cfg.kv_heads * hd, use_bias=qkv_bias, kernel_init=init, **linear)
        self.v = nnx.Linear(d, cfg.kv_heads * hd, use_bias=qkv_bias, kernel_init=init, **linear)
        self.o = nnx.Linear(cfg.n_heads * hd, d, use_bias=cfg.bias, kernel_init=out_init, **linear)

    def __call__(self, x, rope, *, diagnostics: bool, prompt_len: int | None, kv: jax.Array | None = None):
        """x [B, T, D] -> (output [B, T, D], (max |logit| [B], prompt attention [B, H, T] or None) or None).

        ``kv`` [B, T, D], if given, is what keys and values are computed from instead of ``x``.
        """
        cfg = self.cfg
        b, t, _ = x.shape
        kv = x if kv is None else kv
        q = self.q(x).reshape(b, t, cfg.n_heads, cfg.head_dim)
        k = self.k(kv).reshape(b, t, cfg.kv_heads, cfg.head_dim)
        v = self.v(kv).reshape(b, t, cfg.kv_heads, cfg.head_dim)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)

        stats = None
        if use_blockwise(self.implementation, t, diagnostics):
            out = blockwise_attention(q, k, v, cfg.prompt_logit_bias, block=self.block_size)
        else:
            out, logits, weights = plain_attention(q, k, v, cfg.prompt_logit_bias)
            if diagnostics:
                causal = jnp.tril(jnp.ones((t, t), bool))
                max_abs = jnp.max(jnp.where(causal, jnp.abs(logits), 0.0), axis=(1, 2, 3))
                to_prompt = None if prompt_len is None else weights[..., :prompt_len].sum(-1)
                stats = (max_abs, to_prompt)
        return self.o(out.reshape(b, t, cfg.n_heads * cfg.head_dim)), stats


class MLP(nnx.Module):
    def __init__(self, cfg: TransformerConfig, *, rngs: nnx.Rngs):
        self.kind = cfg.mlp
        init = nnx.initializers.normal(cfg.init_std)
        out_init = nnx.initializers.normal(cfg.init_std / math.sqrt(2 * cfg.n_layers))
        linear = dict(use_bias=cfg.bias, param_dtype=cfg.dtype, rngs=rngs)
        self.up = nnx.Linear(cfg.d_model, cfg.mlp_width, kernel_init=init, **linear)
        self.gate = nnx.Linear(cfg.d_model, cfg.mlp_width, kernel_init=init, **linear) if cfg.mlp == "swiglu" else None
        self.down = nnx.Linear(cfg.mlp_width, cfg.d_model, kernel_init=out_init, **linear)

    def __call__(self, x: jax.Array) -> jax.Array:
        """x [B, T, D] -> [B, T, D]."""
        if self.kind == "swiglu":
            hidden = jax.nn.silu(self.gate(x)) * self.up(x)
        elif self.kind == "relu":
            hidden = jax.nn.relu(self.up(x))
        else:
            hidden = jax.nn.gelu(self.up(x), approximate=self.kind == "gelu_tanh")
        return self.down(hidden)


class Block(nnx.Module):
    """Attention then MLP, each with a residual connection; norms before (pre-LN) or after (post-LN)."""

    def __init__(self, cfg: TransformerConfig, *, rngs: nnx.Rngs):
        self.pre_norm = cfg.norm_placement == "pre"
        self.attn_norm, self.attn = Norm(cfg), Attention(cfg, rngs=rngs)
        self.mlp_norm, self.mlp = Norm(cfg), MLP(cfg, rngs=rngs)

    def __call__(self, x, rope, *, diagnostics: bool, prompt_len: int | None, kv_stream: jax.Array | None = None):
        """x [B, T, D] -> (x [B, T, D], norm input scales [2, B, T], attention stats or None).

        ``kv_stream`` [B, T, D], if given, is the residual stream that keys and values are read
        from instead of ``x`` (queries, the residual path and the MLP still use ``x``).
        """
        if self.pre_norm:
            y, attn_scale = self.attn_norm(x)
            kv = None if kv_stream is None else self.attn_norm(kv_stream)[0]
            a, stats = self.attn(y, rope, diagnostics=diagnostics, prompt_len=prompt_len, kv=kv)
            x = x + a
            y, mlp_scale = self.mlp_norm(x)
            x = x + self.mlp(y)
        else:
            a, stats = self.attn(x, rope, diagnostics=diagnostics, prompt_len=prompt_len, kv=kv_stream)
            x, attn_scale = self.attn_norm(x + a)
            x, mlp_scale = self.mlp_norm(x + self.mlp(x))
        return x, jnp.stack([attn_scale, mlp_scale]), stats


class Transformer(nnx.Module):
    """Causal decoder: ``model(tokens) -> ForwardOutput(logits, hidden, diagnostics)``."""

    def __init__(self, cfg: TransformerConfig, *, rngs: nnx.Rngs):
        self.config = cfg
        self.embed = Embedding(cfg.vocab_size, cfg, rngs=rngs)
        self.pos_embed = Embedding(cfg.max_len, cfg, rngs=rngs) if cfg.position == "learned" else None
        self.blocks = nnx.List([Block(cfg, rngs=rngs) for _ in range(cfg.n_layers)])
        self.final_norm = Norm(cfg) if cfg.final_norm else None
        self.lm_head = (
            None
            if cfg.tied_embeddings
            else nnx.Linear(
                cfg.d_model, cfg.vocab_size, use_bias=False,
                kernel_init=nnx.initializers.normal(cfg.init_std), param_dtype=cfg.dtype, rngs=rngs,
            )
        )

    def embed_tokens(self, tokens: jax.Array) -> tuple[jax.Array, tuple[jax.Array, jax.Array] | None]:
        """tokens int [B, T] -> (h_0 [B, T, D]: token plus absolute position embeddings, the RoPE
        (cos, sin) tables [T, head_dim] the blocks rotate by, or None): what block 1 receives."""
        cfg = self.config
        if tokens.ndim != 2:
            raise ValueError(f"tokens must have shape [batch, length], got shape {tokens.shape}")
        length = tokens.shape[1]
        if cfg.position == "learned" and length > cfg.max_len:
            raise ValueError(f"sequence length {length} exceeds the learned position table (max_len={cfg.max_len})")
        x = self.embed(tokens)
        rope = None
        if cfg.position == "learned":
            x = x + self.pos_embed(jnp.arange(length))[None]
        elif cfg.position == "sinusoidal":
            x = x + sinusoidal_positions(length, cfg.d_model, x.dtype)[None]
        elif cfg.position == "rope":
            rope = rope_tables(length, cfg.head_dim, cfg.rope_theta, x.dtype, cfg.rope_scaling)
        return x, rope

    def __call__(
        self,
        tokens: jax.Array,
        *,
        diagnostics: bool = False,
        prompt_len: int | None = None,
        kv_streams: jax.Array | None = None,
    ) -> ForwardOutput:
        """tokens int [B, T] -> ForwardOutput; ``prompt_len`` (static) enables prompt attention diagnostics.

        ``kv_streams`` [L, B, T, D], if given, are the residual streams that block ``l`` reads its
        keys and values from (``kv_streams[l - 1]`` in place of its own input ``h_(l-1)``): the
        patching that separates direct reads of the prompt from relay (``nohair_jax.paths``).
        Token ids are not range-checked here (they are traced values); ``prompt_pair_offsets``
        checks them on the host.
        """
        x, rope = self.embed_tokens(tokens)
        hidden, scales, block_stats = [x], [], []
        for layer, block in enumerate(self.blocks):
            kv_stream = None if kv_streams is None else kv_streams[layer]
            x, scale, stats = block(x, rope, diagnostics=diagnostics, prompt_len=prompt_len, kv_stream=kv_stream)
            hidden.append(x)
            scales.append(scale)
            block_stats.append(stats)

        y = x
        if self.final_norm is not None:
            y, final_scale = self.final_norm(x)
            scales.append(final_scale[None])
        logits = self.embed.attend(y) if self.lm_head is None else self.lm_head(y)

        diag = None
        if diagnostics:
            diag = Diagnostics(
                norm_scale=jnp.concatenate(scales, axis=0),
                max_abs_logit=jnp.stack([s[0] for s in block_stats]),
                prompt_attention=None if prompt_len is None else jnp.stack([s[1] for s in block_stats]),
            )
        return ForwardOutput(logits=logits, hidden=jnp.stack(hidden), diagnostics=diag)
