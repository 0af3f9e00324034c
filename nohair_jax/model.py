"""A GPT-style causal decoder in Flax NNX whose inside can be read.

One file, top to bottom: norm, embedding, RoPE, attention, MLP, block, transformer (the config,
``TransformerConfig``, is ``nohair_jax.config``). The forward pass returns the residual stream
``h_0 .. h_L`` next to the logits. Whatever else an analysis reads, or feeds in, goes through one
argument, a ``Probe`` (hooks on h_0, on each block's keys and values, on what is kept of each layer,
its sublayers' outputs, its attention logits and weights, and every norm's input scale): the
quantities the no-hair bound is stated in are one probe (``bound.conditions``), attention sinks
another (``sinks``). Analyses add probes, not options.
Nothing is stored on the modules: intermediates are return values, so a call is a pure
function of (parameters, tokens) and jits as one program.

Parameter layout (what checkpoint import and independent re-implementations rely on):
``embed.embedding [V, D]``, ``pos_embed.embedding [max_len, D]`` (learned positions only),
``blocks[l].{attn_norm, mlp_norm}.{scale, bias}`` (the sublayers' input norms; none with "output"
placement), ``blocks[l].{attn_out_norm, mlp_out_norm}.scale`` (their output norms: "output" and
"sandwich" placements), ``blocks[l].attn.{q, k, v, o}.{kernel, bias}`` with kernels stored (in, out),
``blocks[l].attn.{q_norm, k_norm}.scale`` (QK-norm only: [head_dim], or the projection's width with
``qk_norm_scope="projection"``), ``blocks[l].mlp.{up, gate, down}.{kernel, bias}`` (``gate`` for
swiglu and geglu only), ``final_norm.{scale, bias}``, ``lm_head.kernel [D, V]`` (untied only).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx, struct

from nohair_jax.attention import (
    DEFAULT_BLOCK, blockwise_attention, logit_terms, plain_attention, position_dtype, soft_cap, use_blockwise,
)
from nohair_jax.checks import integer_array
from nohair_jax.config import (  # noqa: F401  re-exported: the config is read as nohair_jax.model.TransformerConfig too
    MLP_KINDS, NORM_KINDS, NORM_PLACEMENTS, POSITION_KINDS, ROPE_SCALING_KINDS, PromptLogitBias, RopeScaling,
    TransformerConfig, default_config,
)

# On a CPU a measurement's MLPs take at most this many positions per matrix product: at SmolLM2's
# widths XLA's CPU products ran an MLP over 8k to 16k positions 1.3x faster 1k at a time, whose
# [rows, mlp_width] intermediates fit the cache (docs/benchmarks.md).
CPU_ROW_CHUNK = 1024


class ForwardOutput(NamedTuple):
    """logits [B, T, vocab] (None when the probe does not project); hidden [L+1, B, T, D] with hidden[0]
    the embedding output and hidden[l] the residual stream after block l, before any final norm (or
    what the probe's ``read`` keeps of each, stacked [L+1, ...]); blocks, attention: what the probe's
    ``read_block`` and ``read_attention`` keep of every block, stacked [L, ...]; norms: what its
    ``read_norms`` keeps of the norms' input scales (the three None by default); final [B, T, D]: the
    final norm's output, what ``Transformer.unembed`` projects onto the vocabulary (T: the probe's
    ``logits_at`` when given)."""

    logits: jax.Array | None
    hidden: Any
    blocks: Any = None
    final: jax.Array | None = None
    attention: Any = None
    norms: Any = None


class Probe(struct.PyTreeNode, kw_only=True):
    """How an analysis reads the forward pass, or feeds it, without an option of its own on the model.

    ``Transformer.__call__(tokens, probe=...)`` calls these hooks as it runs; the defaults leave the
    forward pass as it is. Each hook is traced inside the scan over blocks, so what it keeps costs
    memory only for what it returns. ``Probe(logits_at=..., project=False)`` sets the output alone;
    subclass and override the hooks for more (``nohair_jax.offsets``, ``jacobian``, ``direct_relay``
    and ``layer_measures`` each define theirs). A probe is a pytree (a frozen ``flax.struct``
    dataclass, keyword arguments only): its arrays pass into a jitted function as arguments, its
    settings that shape the program (``project``, lengths) are static fields
    (``struct.field(pytree_node=False)``).

    embedding(x0 [B, T, D]) -> h_0: the stream block 1 reads (``jacobian``: a shift to differentiate by).
    keys_values(layer) -> [B, T, D] or None: the residual stream this block computes its keys and values
        from instead of its input (``direct_relay``'s patching); ``layer`` is this block's slice of
        ``per_layer``.
    read(x [B, T, D]) -> any arrays: what ``hidden`` keeps of each of h_0 .. h_L (the stream itself by
        default; ``offsets``: the two runs' distance, never the [L+1, B, T, D] stack).
    read_block(attn, mlp [B, T, D]) -> any arrays or None: what ``blocks`` keeps of each block's two
        sublayer outputs (what each adds to the residual stream).
    read_attention(logits, weights [B, H, T, T], reads bool [T, T]) -> any arrays or None: what
        ``attention`` keeps of each block's attention. ``logits``: q.k / sqrt(head_dim) (or ``attn_scale``
        q.k), soft-capped where the model caps, before what positions add (``attention.LogitTerms``);
        ``weights``: the softmax attention applies; ``reads``: the (query, key) pairs it reads (causal,
        inside the layer's window if any). A probe that overrides it gets the plain attention path
        (``reads_attention``: the full weights are materialised).
    read_norms(scales [n_norms, B, T]) -> any arrays or None: what ``norms`` keeps of the input scale
        (standard deviation for layernorm, root mean square for rmsnorm, eps excluded) of every norm on
        the residual stream, in forward order, the final norm last (``TransformerConfig.n_norms``).
    per_layer: arrays with a leading axis L, scanned with the blocks and handed to ``keys_values``.
    logits_at: int [K] sequence indices (0-based) at which the final norm's output is projected, or None
        for every position; project: False skips the projection (``logits`` None, ``final`` kept).
    """

    per_layer: Any = None
    logits_at: jax.Array | None = None
    project: bool = struct.field(pytree_node=False, default=True)

    def __init_subclass__(cls, **kwargs):  # every probe keyword-only: its own fields need no defaults
        super().__init_subclass__(kw_only=True, **kwargs)

    def embedding(self, x0: jax.Array) -> jax.Array:
        return x0

    def keys_values(self, layer: Any) -> jax.Array | None:
        return None

    def read(self, x: jax.Array) -> Any:
        return x

    def read_block(self, attn: jax.Array, mlp: jax.Array) -> Any:
        return None

    def read_attention(self, logits: jax.Array, weights: jax.Array, reads: jax.Array) -> Any:
        return None

    def read_norms(self, scales: jax.Array) -> Any:
        return None

    @property
    def reads_attention(self) -> bool:
        """Whether this probe reads attention's logits and weights (so they must be materialised)."""
        return type(self).read_attention is not Probe.read_attention


class Sublayers(Probe):
    """Every block's (attention, MLP) outputs in ``blocks``, [L, B, T, D] each: in a pre-LN model
    ``hidden[l] = hidden[l-1] + attn[l-1] + mlp[l-1]``."""

    def read_block(self, attn, mlp):
        return attn, mlp


class PatchedKeysValues(Probe):
    """Block l computes its keys and values from ``per_layer[l - 1]`` [B, S, D] instead of its own input
    (``direct_relay``'s split of the offset into its direct and relayed parts)."""

    def keys_values(self, layer):
        return layer


class Norm(nnx.Module):
    """LayerNorm or RMSNorm over the last axis that also returns its input's scale: the config's
    norm over d_model, or ``kind`` over ``width`` features (QK-norm: rmsnorm over head_dim)."""

    def __init__(self, cfg: TransformerConfig, *, width: int | None = None, kind: str | None = None):
        self.kind, self.eps = kind or cfg.norm, cfg.norm_eps
        width = width or cfg.d_model
        self.scale = nnx.Param(jnp.ones(width, cfg.dtype))
        self.bias = nnx.Param(jnp.zeros(width, cfg.dtype)) if cfg.bias and self.kind == "layernorm" else None

    def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        """x [..., D] -> (normalised x [..., D], input scale [...])."""
        if self.kind == "layernorm":
            x = x - x.mean(-1, keepdims=True)
        mean_square = jnp.mean(x * x, axis=-1)
        y = x * jax.lax.rsqrt(mean_square + self.eps)[..., None] * self.scale[...]
        if self.bias is not None:
            y = y + self.bias[...]
        return y, jnp.sqrt(mean_square)


def token_ids(tokens, name: str = "tokens") -> jax.Array | np.ndarray:
    """``tokens`` as an integer array [B, T], neither axis empty (a traced array is taken as it is); a
    one-line ValueError or TypeError naming ``name`` otherwise. Ranges are checked on the host by
    the measurements (``offsets.check_tokens``): here the ids may be traced."""
    tokens = integer_array(name, tokens)
    if tokens.ndim != 2 or 0 in tokens.shape:
        raise ValueError(f"{name} must have shape [batch, length], neither empty, got shape {tokens.shape}")
    return tokens


class Embedding(nnx.Module):
    """A table of vectors, read by index; computes in the table's own dtype (nnx.Embed would cast
    to its construction dtype, which breaks float64 measurements of a float32 model)."""

    def __init__(self, count: int, cfg: TransformerConfig, *, rngs: nnx.Rngs):
        self.embedding = nnx.Param(nnx.initializers.normal(cfg.init_std)(rngs.params(), (count, cfg.d_model), cfg.dtype))

    def __call__(self, ids: jax.Array) -> jax.Array:
        """ids int [...] -> [..., D]."""
        return jnp.take(self.embedding[...], ids, axis=0)


def _initializers(cfg: TransformerConfig):
    """(init, out_init): N(0, init_std) for weight matrices, and for the projections that write into
    the residual stream N(0, init_std / sqrt(2 n_layers)) where ``scaled_residual_init`` (GPT-2's)."""
    scale = math.sqrt(2 * cfg.n_layers) if cfg.scaled_residual_init else 1.0
    return nnx.initializers.normal(cfg.init_std), nnx.initializers.normal(cfg.init_std / scale)


def dynamic_ntk_theta(theta: float, scaling: RopeScaling, length: int, rotary_dim: int) -> float:
    """The RoPE base of a call of ``length`` tokens under dynamic NTK scaling (``RopeScaling``): ``theta`` up to
    ``original_max_len`` tokens, raised past it. Python floats, in transformers' order of operations."""
    if length <= scaling.original_max_len:
        return theta
    if rotary_dim <= 2:
        raise ValueError(f"dynamic RoPE scaling needs more than 2 rotated features, got {rotary_dim}")
    stretch = scaling.factor * length / scaling.original_max_len - (scaling.factor - 1)
    return theta * stretch ** (rotary_dim / (rotary_dim - 2))


def scale_rope_frequencies(inv_freq: jax.Array, scaling: RopeScaling, length: int) -> jax.Array:
    """inv_freq [R / 2] -> the same frequencies under ``scaling`` in a call of ``length`` tokens (see
    ``RopeScaling``; ``dynamic`` changes the base instead, ``dynamic_ntk_theta``)."""
    if scaling.kind == "linear":
        return inv_freq / scaling.factor
    if scaling.kind in ("longrope", "factors"):
        scaling.check_frequencies(inv_freq.shape[0])
        long = scaling.kind == "longrope" and length > scaling.original_max_len
        # float32 first: transformers makes its longrope factors float32 tensors whatever the model's dtype.
        factors = np.asarray(scaling.long_factors if long else scaling.factors, np.float32)
        return inv_freq / jnp.asarray(factors, inv_freq.dtype)
    if scaling.kind == "dynamic":
        return inv_freq
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
    """cos, sin [length, head_dim] in the half-split (Llama / Hugging Face) convention, for a call of ``length``
    tokens (``head_dim``: the rotated features R). ``dynamic`` and ``longrope`` scalings choose their
    frequencies from ``length`` (``RopeScaling``), and ``longrope`` scales cos and sin by its attention factor."""
    work = position_dtype(dtype)
    if scaling is not None and scaling.kind == "dynamic":
        theta = dynamic_ntk_theta(theta, scaling, length, head_dim)
    inv_freq = 1.0 / theta ** (jnp.arange(0, head_dim, 2, dtype=work) / head_dim)
    if scaling is not None:
        inv_freq = scale_rope_frequencies(inv_freq, scaling, length)
    angles = jnp.arange(length, dtype=work)[:, None] * inv_freq[None, :]
    angles = jnp.concatenate([angles, angles], axis=-1)
    cos, sin = jnp.cos(angles), jnp.sin(angles)
    if scaling is not None and scaling.kind == "longrope":
        cos, sin = cos * scaling.attention_factor, sin * scaling.attention_factor
    return cos.astype(dtype), sin.astype(dtype)


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """x [B, T, heads, head_dim] rotated by position; cos, sin [T, R]: the first R features of each head
    turn (R = head_dim but for GPT-NeoX's partial rotary), the rest pass unchanged."""
    r = cos.shape[-1]
    turned, kept = x[..., :r], x[..., r:]
    rotated = jnp.concatenate([-turned[..., r // 2:], turned[..., : r // 2]], axis=-1)
    return jnp.concatenate([turned * cos[:, None, :] + rotated * sin[:, None, :], kept], axis=-1)


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
    ``implementation`` "auto" takes blockwise from ``attention.BLOCKWISE_FROM`` positions on unless a
    probe reads the weights (``Probe.read_attention``); force either for a whole model
    with ``model.set_attributes(implementation="plain")`` (or "blockwise", ``block_size=...``).
    """

    def __init__(self, cfg: TransformerConfig, *, rngs: nnx.Rngs):
        self.cfg = cfg
        self.implementation = "auto"
        self.block_size = DEFAULT_BLOCK
        init, out_init = _initializers(cfg)
        qkv_bias = cfg.bias if cfg.qkv_bias is None else cfg.qkv_bias
        d, hd = cfg.d_model, cfg.head_dim
        linear = dict(param_dtype=cfg.dtype, rngs=rngs)
        self.q = nnx.Linear(d, cfg.n_heads * hd, use_bias=qkv_bias, kernel_init=init, **linear)
        self.k = nnx.Linear(d, cfg.kv_heads * hd, use_bias=qkv_bias, kernel_init=init, **linear)
        self.v = nnx.Linear(d, cfg.kv_heads * hd, use_bias=qkv_bias, kernel_init=init, **linear)
        self.o = nnx.Linear(cfg.n_heads * hd, d, use_bias=cfg.bias, kernel_init=out_init, **linear)
        # QK-norm: |q.k| / sqrt(hd) <= sqrt(hd) max|g_q| max|g_k| whatever the input (a bound by construction).
        by_head = cfg.qk_norm_scope == "head"
        self.q_norm = Norm(cfg, width=hd if by_head else cfg.n_heads * hd, kind="rmsnorm") if cfg.qk_norm else None
        self.k_norm = Norm(cfg, width=hd if by_head else cfg.kv_heads * hd, kind="rmsnorm") if cfg.qk_norm else None

    def __call__(self, x, rope, *, read: Callable | None = None, kv: jax.Array | None = None,
                 window: jax.Array | None = None):
        """x [B, T, D] -> (output [B, T, D], what ``read(logits, weights, reads)`` keeps, or None without
        ``read``: a probe's ``read_attention``).

        ``kv`` [B, T, D], if given, is what keys and values are computed from instead of ``x``.
        ``window``, the layer's attention window (traced int) where it differs per layer (``window_layers``).
        """
        cfg = self.cfg
        b, t, _ = x.shape
        kv = x if kv is None else kv
        q, k, v = self.q(x), self.k(kv), self.v(kv)
        if cfg.qk_norm and cfg.qk_norm_scope == "projection":
            q, k = self.q_norm(q)[0], self.k_norm(k)[0]
        q, k, v = (y.reshape(b, t, -1, cfg.head_dim) for y in (q, k, v))
        if cfg.qk_norm and cfg.qk_norm_scope == "head":
            q, k = self.q_norm(q)[0], self.k_norm(k)[0]
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)

        kept, terms = None, logit_terms(cfg, window)
        if use_blockwise(self.implementation, t, read is not None):
            out = blockwise_attention(q, k, v, terms, block=self.block_size)
        else:
            out, logits, weights = plain_attention(q, k, v, terms)
            if read is not None:
                distance = jnp.arange(t)[:, None] - jnp.arange(t)[None, :]
                kept = read(logits, weights, (distance >= 0) & (distance < (t if terms.window is None else terms.window)))
        return self.o(out.reshape(b, t, cfg.n_heads * cfg.head_dim)), kept


def by_rows(f: Callable[[jax.Array], jax.Array], x: jax.Array, chunk: int | None) -> jax.Array:
    """f(x) for x [..., D] and an f that acts on each row [D] alone, computed at most ``chunk`` rows
    at a time, in chunks as equal as their count allows (all at once where ``chunk`` is None)."""
    rows = x.reshape(-1, x.shape[-1])
    n = rows.shape[0]
    if chunk is None or n <= chunk:
        return f(x)
    out = jax.lax.map(f, rows, batch_size=-(-n // -(-n // chunk)))
    return out.reshape(*x.shape[:-1], out.shape[-1])


class MLP(nnx.Module):
    """The position-wise feed-forward sublayer. ``row_chunk``: the most positions per matrix product
    (``by_rows``), an int or None (all at once); "auto", the default, is None in a direct call and
    what ``for_measurement`` makes it in the measurements."""

    def __init__(self, cfg: TransformerConfig, *, rngs: nnx.Rngs):
        self.kind = cfg.mlp
        self.row_chunk = "auto"
        init, out_init = _initializers(cfg)
        linear = dict(use_bias=cfg.bias, param_dtype=cfg.dtype, rngs=rngs)
        self.up = nnx.Linear(cfg.d_model, cfg.mlp_width, kernel_init=init, **linear)
        self.gate = nnx.Linear(cfg.d_model, cfg.mlp_width, kernel_init=init, **linear) if cfg.gated else None
        self.down = nnx.Linear(cfg.mlp_width, cfg.d_model, kernel_init=out_init, **linear)

    def __call__(self, x: jax.Array) -> jax.Array:
        """x [B, T, D] -> [B, T, D]."""
        return by_rows(self.rowwise, x, None if self.row_chunk == "auto" else self.row_chunk)

    def rowwise(self, x: jax.Array) -> jax.Array:
        if self.kind == "swiglu":
            hidden = jax.nn.silu(self.gate(x)) * self.up(x)
        elif self.kind == "geglu":
            hidden = jax.nn.gelu(self.gate(x), approximate=True) * self.up(x)
        elif self.kind == "relu":
            hidden = jax.nn.relu(self.up(x))
        else:
            hidden = jax.nn.gelu(self.up(x), approximate=self.kind == "gelu_tanh")
        return self.down(hidden)


class Block(nnx.Module):
    """Attention then MLP, each with a residual connection and norms where the config's ``BlockLayout``
    puts them: before each sublayer (pre), on its output before the residual add (output: OLMo 2), both
    (sandwich: Gemma), or after the residual add (post-LN). GPT-NeoX's parallel block: the MLP reads the
    block's input, not x + attn. Norms the layout does not hold are None."""

    def __init__(self, cfg: TransformerConfig, *, rngs: nnx.Rngs):
        layout = cfg.layout
        self.parallel, self.post_norm = layout.parallel, layout.normalises_stream
        held = {slot.attribute for slot in layout.norms()}
        norm = lambda name: Norm(cfg) if name in held else None  # noqa: E731
        self.attn_norm, self.attn_out_norm = norm("attn_norm"), norm("attn_out_norm")
        self.mlp_norm, self.mlp_out_norm = norm("mlp_norm"), norm("mlp_out_norm")
        self.attn, self.mlp = Attention(cfg, rngs=rngs), MLP(cfg, rngs=rngs)

    def attention_input(self, x: jax.Array) -> jax.Array:
        """What this block's attention reads from the stream x [B, T, D]: x through the input norm, where
        the layout has one before the sublayer (pre, sandwich), else x itself."""
        return x if self.post_norm or self.attn_norm is None else self.attn_norm(x)[0]

    def __call__(self, x, rope, *, read_attention: Callable | None = None, kv_stream: jax.Array | None = None,
                 window: jax.Array | None = None):
        """x [B, T, D] -> (x [B, T, D], norm input scales [block_norms, B, T] in forward order, what
        ``read_attention`` keeps of the attention (``Attention``), (attention output, MLP output) [B, T, D]
        each: what each sublayer adds to the residual stream, its output norm applied).

        ``kv_stream`` [B, T, D], if given, is the residual stream that keys and values are read
        from instead of ``x`` (queries, the residual path and the MLP still use ``x``). ``window``:
        the layer's attention window where it differs per layer (``Attention``).
        """
        scales = []

        def norm(layer, y):  # a norm where the placement has one, its input's scale recorded
            if layer is None:
                return y
            y, scale = layer(y)
            scales.append(scale)
            return y

        if self.post_norm:
            a, kept = self.attn(x, rope, read=read_attention, kv=kv_stream, window=window)
            x = norm(self.attn_norm, x + a)
            m = self.mlp(x)
            return norm(self.mlp_norm, x + m), jnp.stack(scales), kept, (a, m)
        kv = None if kv_stream is None or self.attn_norm is None else self.attn_norm(kv_stream)[0]
        a, kept = self.attn(norm(self.attn_norm, x), rope, read=read_attention, kv=kv_stream if kv is None else kv,
                            window=window)
        a = norm(self.attn_out_norm, a)
        m = norm(self.mlp_out_norm, self.mlp(norm(self.mlp_norm, x if self.parallel else x + a)))
        return x + a + m, jnp.stack(scales), kept, (a, m)


class Transformer(nnx.Module):
    """Causal decoder: ``model(tokens) -> ForwardOutput(logits, hidden, ...)``, ``model(tokens, probe=...)``."""

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

    def unembed(self, y: jax.Array, start: int | jax.Array = 0, size: int | None = None) -> jax.Array:
        """The final norm's output y [..., D] -> logits [..., size] for the vocabulary entries
        ``start .. start + size - 1`` (default: all of them), against the tied embedding or
        ``lm_head``: a slice of the vocabulary at a time is how ``offsets.streamed_next_token_kl``
        keeps its logits small. ``start`` may be traced; ``size`` is static."""
        size = self.config.vocab_size if size is None else size
        if self.lm_head is None:
            logits = y @ jax.lax.dynamic_slice_in_dim(self.embed.embedding[...], start, size, axis=0).T
        else:
            logits = y @ jax.lax.dynamic_slice_in_dim(self.lm_head.kernel[...], start, size, axis=1)
        return soft_cap(logits, self.config.final_softcap)

    def embed_tokens(self, tokens: jax.Array) -> tuple[jax.Array, tuple[jax.Array, jax.Array] | None]:
        """tokens int [B, T] -> (h_0 [B, T, D]: the token's embedding times ``embed_scale`` plus absolute
        position embeddings, the RoPE (cos, sin) tables [T, rotary_dim] the blocks rotate by, or None):
        what block 1 receives. (The ``window_layers`` of a model with ``local_rope_theta`` rotate by that
        base's tables instead, built in ``__call__``.)"""
        cfg = self.config
        tokens = token_ids(tokens)
        length = tokens.shape[1]
        if cfg.position == "learned" and length > cfg.max_len:
            raise ValueError(f"sequence length {length} exceeds the learned position table (max_len={cfg.max_len})")
        x = self.embed(tokens)
        if cfg.embed_scale != 1.0:
            x = x * jnp.asarray(cfg.embed_scale, x.dtype)
        rope = None
        if cfg.position == "learned":
            x = x + self.pos_embed(jnp.arange(length))[None]
        elif cfg.position == "sinusoidal":
            x = x + sinusoidal_positions(length, cfg.d_model, x.dtype)[None]
        elif cfg.position == "rope":
            rope = rope_tables(length, cfg.rotary_dim, cfg.rope_theta, x.dtype, cfg.rope_scaling)
        return x, rope

    def layer_windows(self) -> jax.Array | None:
        """Each layer's attention window, int32 [L], scanned with the blocks where the window is on some
        layers only (``window_layers``; the others get one wider than any sequence), else None."""
        cfg = self.config
        if cfg.window_layers is None:
            return None
        no_window = jnp.iinfo(jnp.int32).max
        return jnp.asarray([cfg.sliding_window if l in cfg.window_layers else no_window for l in range(cfg.n_layers)],
                           jnp.int32)

    def __call__(
        self,
        tokens: jax.Array,
        *,
        probe: Probe | None = None,
    ) -> ForwardOutput:
        """tokens int [B, T] -> ForwardOutput; ``probe``: what an analysis reads or feeds (``Probe``; None:
        the plain forward pass).

        Token ids are not range-checked here (they are traced values); ``prompt_pair_offsets`` checks
        them on the host.
        """
        probe = Probe() if probe is None else probe
        cfg = self.config
        x0, rope = self.embed_tokens(tokens)  # checks the tokens (``token_ids``)
        windows = self.layer_windows()
        # Gemma 3's window layers rotate by a RoPE base of their own.
        local_rope = (rope_tables(x0.shape[1], cfg.rotary_dim, cfg.local_rope_theta, x0.dtype)
                      if windows is not None and cfg.local_rope_theta is not None else None)
        x0 = probe.embedding(x0)
        block_def = nnx.graphdef(self.blocks[0])
        read_attention = probe.read_attention if probe.reads_attention else None

        def step(x, inputs):
            state, probed, window = inputs
            layer_rope = rope
            if local_rope is not None:
                layer_rope = tuple(jnp.where(window < jnp.iinfo(jnp.int32).max, l, g) for g, l in zip(rope, local_rope))
            x, scale, attention, (attn, mlp) = nnx.merge(block_def, state)(
                x, layer_rope, read_attention=read_attention, kv_stream=probe.keys_values(probed), window=window)
            return x, (probe.read(x), scale, attention, probe.read_block(attn, mlp))

        # The blocks run as one scanned step over their stacked parameters (and each layer's window):
        # one block is traced and compiled whatever the depth (30 unrolled layers took about 25 s to
        # compile on a CPU).
        stacked = jax.tree.map(lambda *layers: jnp.stack(layers), *(nnx.state(b) for b in self.blocks))
        x, (hidden, scales, attention, blocks) = jax.lax.scan(step, x0, (stacked, probe.per_layer, windows))

        y, scales = x, scales.reshape(-1, *scales.shape[2:])  # [L, block_norms, B, T] -> [block_norms L, B, T]
        if self.final_norm is not None:
            y, final_scale = self.final_norm(x)
            scales = jnp.concatenate([scales, final_scale[None]])
        if probe.logits_at is not None:
            y = y[:, probe.logits_at]
        logits = self.unembed(y) if probe.project else None
        hidden = jax.tree.map(lambda first, rest: jnp.concatenate([first[None], rest]), probe.read(x0), hidden)
        return ForwardOutput(logits=logits, hidden=hidden, blocks=blocks, final=y, attention=attention,
                             norms=probe.read_norms(scales))


def for_measurement(model: Transformer) -> Transformer:
    """``model``, changed in place, with the settings that pay where it only runs forward: every MLP
    whose ``row_chunk`` is "auto" takes ``CPU_ROW_CHUNK`` positions at a time on a CPU (all at once
    elsewhere). The per-pair engine applies it to the model it runs; training does not (summed
    over chunks, the weight gradients made a small MLP's forward and backward 1.2x to 1.6x slower)."""
    chunk = CPU_ROW_CHUNK if jax.default_backend() == "cpu" else None
    for _, node in nnx.iter_graph(model):
        if isinstance(node, MLP) and node.row_chunk == "auto":
            node.row_chunk = chunk
    return model


def split_stacked_blocks(model: Transformer) -> tuple[nnx.GraphDef, nnx.State, nnx.State]:
    """``nnx.split(model)`` with the blocks' parameters taken out and stacked [L, ...]: (graphdef,
    the other parameters, the blocks'). What a jitted call over many inputs takes in place of the
    model's state: inside, ``merge_stacked_blocks`` hands each block a slice of the stack, and XLA
    folds the forward pass's ``jnp.stack`` of those slices back into the stack itself, so the
    per-call copy of every block parameter (about 4 % of a SmolLM2 offsets call on a CPU) is made
    once, here, instead of on every call. Bit-identical results."""
    graphdef, state = nnx.split(model)
    rest = nnx.State({key: value for key, value in state.items() if key != "blocks"})
    layers = [state["blocks"][l] for l in range(len(model.blocks))]
    return graphdef, rest, jax.tree.map(lambda *xs: jnp.stack(xs), *layers)


def merge_stacked_blocks(graphdef: nnx.GraphDef, rest: nnx.State, blocks: nnx.State) -> Transformer:
    """The inverse of ``split_stacked_blocks``: a ``Transformer`` whose block l reads ``blocks[l]``."""
    n_layers = jax.tree.leaves(blocks)[0].shape[0]
    state = nnx.State(dict(rest))
    state["blocks"] = nnx.State({l: jax.tree.map(lambda x: x[l], blocks) for l in range(n_layers)})
    return nnx.merge(graphdef, state)


@functools.lru_cache(maxsize=16)
def model_skeleton(cfg: TransformerConfig) -> tuple[nnx.GraphDef, nnx.State]:
    """The ``Transformer`` of ``cfg`` without weights: (graphdef, state of ``jax.ShapeDtypeStruct`` leaves), for
    ``nnx.merge`` with parameters read from elsewhere (a checkpoint, another model's state).

    ``nnx.eval_shape``'s time grows with the square of the parameters traced at once (flax looks up each
    traced parameter's sharding, and JAX's error text for a tracer walks the whole trace), and every
    block is the same function of ``cfg``, so one block is traced, into a one-block model's shape, and
    copied: 0.2 s for SmolLM2-135M's 30 layers instead of 3.4 s for the whole model at once and 2.5 s
    block by block (the same graphdef: tests/test_model.py). Cached per config; both parts are immutable;
    ``nnx.merge`` builds a new model.
    """
    # window_layers index the blocks: the one block's stays a valid index (the blocks are traced from cfg)
    one_block = dataclasses.replace(cfg, n_layers=1, window_layers=cfg.window_layers and (0,))
    model = nnx.eval_shape(lambda: Transformer(one_block, rngs=nnx.Rngs(0)))
    block = nnx.eval_shape(lambda: Block(cfg, rngs=nnx.Rngs(0)))
    model.blocks = nnx.List([nnx.clone(block) for _ in range(cfg.n_layers)])
    model.config = cfg
    return nnx.split(model)


def untrained_model(depth: int, *, seed: int = 0, **config) -> Transformer:
    """``config.default_config(depth, **config)`` at random init from ``seed``."""
    return Transformer(default_config(depth, **config), rngs=nnx.Rngs(seed))
