"""The model's configuration: plain frozen dataclasses, no JAX (``nohair --help`` reads the kinds).

``TransformerConfig`` is every architectural choice of ``nohair_jax.model.Transformer``; ``BlockLayout``
its block's layout, the one statement of it that the model and every analysis read;
``PromptLogitBias`` the dilution-cancelling bias (docs/definitions.md#logit-bias); ``RopeScaling``
Hugging Face's RoPE frequency scalings.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

from nohair_jax.checks import check_int

MLP_KINDS = ("gelu", "gelu_tanh", "relu", "swiglu", "geglu")
NORM_KINDS = ("layernorm", "rmsnorm")
NORM_PLACEMENTS = ("pre", "post", "output", "sandwich")
QK_NORM_SCOPES = ("head", "projection")
POSITION_KINDS = ("learned", "sinusoidal", "rope", "alibi", "none")
ROPE_SCALING_KINDS = ("linear", "llama3", "dynamic", "longrope", "factors")


class NormSlot(NamedTuple):
    """One norm of a block: its attribute on ``model.Block``, its name in reports, the sublayer it belongs to."""

    attribute: str
    name: str
    sublayer: str  # "attention" or "mlp"


_SLOTS = {  # every norm a block can hold, in forward order
    "attn_norm": NormSlot("attn_norm", "attention", "attention"),
    "attn_out_norm": NormSlot("attn_out_norm", "attention output", "attention"),
    "mlp_norm": NormSlot("mlp_norm", "MLP", "mlp"),
    "mlp_out_norm": NormSlot("mlp_out_norm", "MLP output", "mlp"),
}


@dataclasses.dataclass(frozen=True)
class BlockLayout:
    """Where a block's norms sit and how its two sublayers f (attention, then the MLP) combine.

    ``placement`` (``NORM_PLACEMENTS``): "pre" ``x + f(N(x))`` (GPT-2, Llama), "post" ``N(x + f(x))`` (the
    original transformer), "output" ``x + N(f(x))`` (OLMo 2), "sandwich" ``x + N'(f(N(x)))`` (Gemma 2, 3).
    ``parallel``: both sublayers read the block's input, ``x + attn + mlp`` (GPT-NeoX), not the MLP ``x + attn``.
    The model builds its blocks from this value and the analyses ask it, instead of testing names.
    """

    placement: str = "pre"
    parallel: bool = False

    @property
    def input_norms(self) -> bool:
        """A norm on what each sublayer reads (pre, sandwich), or on the stream after each add (post)."""
        return self.placement != "output"

    @property
    def output_norms(self) -> bool:
        """A norm on each sublayer's output before the residual add (output, sandwich)."""
        return self.placement in ("output", "sandwich")

    @property
    def normalises_stream(self) -> bool:
        """The residual stream itself is normalised after each add (post-LN)."""
        return self.placement == "post"

    @property
    def pre_ln(self) -> bool:
        """Sublayers read a normalised copy of the stream and add their output as it is, one after the other:
        the blocks ``x + Attn(N(x))``, ``x' + MLP(N(x'))`` the bound and the relay model are derived for."""
        return self.placement == "pre" and not self.parallel

    def norms(self) -> tuple[NormSlot, ...]:
        """The block's norms in forward order (what ``Probe.read_norms`` lists per block)."""
        held = [slot for slot in _SLOTS.values()
                if (slot.attribute.endswith("out_norm") and self.output_norms)
                or (not slot.attribute.endswith("out_norm") and self.input_norms)]
        return tuple(held)

    def __str__(self) -> str:
        kind = {"pre": "pre-LN", "post": "post-LN", "output": "output norms", "sandwich": "sandwich norms"}[self.placement]
        return kind + (", parallel residual" if self.parallel else "")


@dataclasses.dataclass(frozen=True)
class PromptLogitBias:
    """The dilution-cancelling logit bias (docs/definitions.md#logit-bias).

    A query at absolute position ``i > prompt_len`` (1-based) gets ``gamma * log(i / prompt_len)``
    added to its attention logits on the prompt keys ``j <= prompt_len``. With uniform logits
    the prompt's share of attention becomes ``i / (2i - P)`` at ``gamma = 1``, which tends to 1/2
    instead of 0.
    """

    prompt_len: int
    gamma: float = 1.0

    def __post_init__(self):
        object.__setattr__(self, "prompt_len", check_int("PromptLogitBias.prompt_len", self.prompt_len))
        if not math.isfinite(self.gamma):
            raise ValueError(f"PromptLogitBias.gamma must be finite, got {self.gamma!r}")


@dataclasses.dataclass(frozen=True)
class RopeScaling:
    """RoPE frequency scaling, as Hugging Face's ``rope_scaling`` (``rope_parameters``) types, and llama.cpp's
    factor tensors. ``inv_freq[i] = theta^(-2i / R)`` for the R rotated features of a head, i < R / 2.

    ``linear``: every inverse frequency divided by ``factor`` (position interpolation).
    ``llama3``: Llama 3.1's rule on wavelengths ``2 pi / inv_freq``: those shorter than
    ``original_max_len / high_freq_factor`` are kept, those longer than
    ``original_max_len / low_freq_factor`` are divided by ``factor``, and in between the inverse
    frequency is interpolated linearly in ``original_max_len / wavelength``.
    ``dynamic``: dynamic NTK. A call of T > ``original_max_len`` tokens (transformers' ``max_position_embeddings``)
    rotates with the base ``theta (factor T / original_max_len - (factor - 1))^(R / (R - 2))``; shorter calls
    with ``theta``.
    ``longrope``: LongRoPE (Phi-3 128k, Phi-3.5, Phi-4-mini): ``inv_freq[i] / factors[i]`` (transformers'
    ``short_factor``) in a call of at most ``original_max_len`` tokens, ``inv_freq[i] / long_factors[i]``
    (``long_factor``) in a longer one; cos and sin multiplied by ``attention_factor`` in both. The factors
    are rounded to float32 first, as transformers does whatever the model's dtype.
    ``factors``: ``inv_freq[i] / factors[i]`` at every length: llama.cpp's ``rope_freqs.weight``, the form a
    GGUF file gives Llama 3.1's ``llama3`` scaling (its divisors ``factor``, 1, and ``1 / ((1 - s) / factor + s)``
    with s the interpolation weight above).

    ``dynamic`` and ``longrope`` read the length T of the whole call, as transformers does (its largest
    position id + 1): a position's frequencies depend on how long the call is, not on the position alone.
    Past ``original_max_len`` every position of a call, the first included, rotates by the long frequencies
    (or the rescaled base), so a prefix computed alone differs from the same prefix inside a longer call.
    (transformers' ``dynamic`` also keeps, between calls, the base of the longest call since the last one of
    at most ``original_max_len`` tokens; here each call computes as a freshly loaded transformers model does.)
    """

    kind: str
    factor: float = 1.0  # linear, llama3, dynamic
    low_freq_factor: float = 1.0  # llama3 only
    high_freq_factor: float = 4.0  # llama3 only
    original_max_len: int = 8192  # llama3, dynamic, longrope: the context the model was pretrained at
    factors: tuple[float, ...] = ()  # longrope, factors: one divisor per rotated frequency, R / 2 of them
    long_factors: tuple[float, ...] = ()  # longrope only: the divisors of calls longer than original_max_len
    attention_factor: float = 1.0  # longrope only: the scale of cos and sin

    def __post_init__(self):
        if self.kind not in ROPE_SCALING_KINDS:
            raise ValueError(f"RopeScaling.kind={self.kind!r} is not one of {ROPE_SCALING_KINDS}")
        for name in ("factor", "low_freq_factor", "high_freq_factor", "original_max_len", "attention_factor"):
            if not _positive(getattr(self, name)):
                raise ValueError(f"RopeScaling.{name} must be a finite number > 0, got {getattr(self, name)!r}")
        for name in ("factors", "long_factors"):
            value = getattr(self, name)
            if not (isinstance(value, (list, tuple)) and all(_positive(v) for v in value)):
                raise ValueError(f"RopeScaling.{name} must be a list of finite numbers > 0, got {value!r:.80}")
            object.__setattr__(self, name, tuple(float(v) for v in value))  # a list from JSON
        reads = {"factors": ("longrope", "factors"), "long_factors": ("longrope",), "attention_factor": ("longrope",)}
        for name, kinds in reads.items():
            if self.kind not in kinds and getattr(self, name) != getattr(RopeScaling, name):
                raise ValueError(f"RopeScaling.{name} is read by kind {' and '.join(kinds)} only, not {self.kind!r}")
        if self.kind in ("longrope", "factors") and not self.factors:
            raise ValueError(f"RopeScaling.factors must be given for kind {self.kind!r}")
        if self.kind == "longrope" and len(self.long_factors) != len(self.factors):
            raise ValueError(f"RopeScaling.long_factors has {len(self.long_factors)} entries, factors "
                             f"{len(self.factors)}: one of each per rotated frequency")
        if self.kind == "llama3" and not self.high_freq_factor > self.low_freq_factor:
            raise ValueError(
                f"RopeScaling needs high_freq_factor > low_freq_factor, got {self.high_freq_factor} "
                f"and {self.low_freq_factor}"
            )

    def check_frequencies(self, count: int) -> None:
        """ValueError naming the field unless each factor list has ``count`` entries (R / 2: one per rotated
        frequency of a head)."""
        for name in ("factors", "long_factors"):
            n = len(getattr(self, name))
            if n and n != count:
                raise ValueError(f"RopeScaling.{name} has {n} entries, expected {count} (one per rotated "
                                 f"frequency: half the {2 * count} rotated features of a head)")


def _positive(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Architecture of a causal decoder; expresses GPT-2 and Llama-family models.

    GPT-2: ``mlp="gelu_tanh", norm="layernorm", position="learned", bias=True, tied_embeddings=True``.
    Llama: ``mlp="swiglu", norm="rmsnorm", position="rope", bias=False, n_kv_heads < n_heads``.
    Qwen3: Llama's with ``qk_norm`` and its own ``head_width``. GPT-NeoX (Pythia): ``parallel_residual``,
    ``rotary_fraction`` below 1, exact GELU, LayerNorm with biases, an untied output. OLMo 2:
    ``norm_placement="output"`` and ``qk_norm_scope="projection"``. Gemma 2 and 3: ``"sandwich"`` norms,
    ``mlp="geglu"``, ``embed_scale``, ``attn_scale``, a window on ``window_layers`` only; Gemma 2 soft-caps
    (``attn_softcap``, ``final_softcap``), Gemma 3 has ``qk_norm`` and ``local_rope_theta``.
    ``norm_placement``: "pre" ``x + f(norm(x))``, "post" ``norm(x + f(x))``, "output" ``x + norm(f(x))``,
    "sandwich" ``x + norm'(f(norm(x)))``, for each sublayer f.
    The architecture contrasts (docs/contrasts.md): ``norm_placement="post"``, ``position="alibi"``
    (Press et al.'s linear recency bias ``-m_h (i - j)`` on the logits, slopes
    ``attention.alibi_slopes``), ``sliding_window``, ``qk_norm``, ``prompt_logit_bias``.
    """

    vocab_size: int = 256
    d_model: int = 128
    n_heads: int = 4
    n_kv_heads: int | None = None  # None: as many as n_heads (no grouped-query attention)
    head_width: int | None = None  # features per head; None: d_model // n_heads (Qwen3 sets its own)
    n_layers: int = 4
    d_mlp: int | None = None  # None: 4 * d_model
    mlp: str = "gelu"
    norm: str = "layernorm"
    norm_placement: str = "pre"
    norm_eps: float = 1e-5
    final_norm: bool = True
    position: str = "learned"
    rope_theta: float = 10000.0
    rotary_fraction: float = 1.0  # RoPE turns the first rotary_fraction of each head's features (GPT-NeoX: 0.25)
    rope_scaling: RopeScaling | None = None  # None: plain RoPE
    max_len: int = 1024
    tied_embeddings: bool = True
    bias: bool = True  # biases of the linear layers and of LayerNorm
    qkv_bias: bool | None = None  # None: same as `bias` (Qwen2 has bias=False, qkv_bias=True)
    dtype: str = "float32"  # parameter dtype; the forward computes in the parameters' dtype
    init_std: float = 0.02
    # GPT-2's init: the projections that write into the residual stream get init_std / sqrt(2 n_layers).
    # False: every weight matrix N(0, init_std), as transformers' Llama-family init (`initializer_range`).
    scaled_residual_init: bool = True
    prompt_logit_bias: PromptLogitBias | None = None
    # Mistral's sliding window: a query at i reads the keys j with i - window < j <= i; None: all j <= i.
    sliding_window: int | None = None
    qk_norm: bool = False  # RMSNorm (eps norm_eps, a gain per feature) on q and k, before RoPE
    qk_norm_scope: str = "head"  # "head": over each head's features; "projection": over all of q (of k) at once
    parallel_residual: bool = False  # GPT-NeoX: attention and MLP both read the block's input, x + attn + mlp
    embed_scale: float = 1.0  # h_0 = embed_scale * the token's embedding (Gemma: sqrt(d_model))
    attn_scale: float | None = None  # the attention logit is attn_scale * q.k; None: 1 / sqrt(head_dim)
    attn_softcap: float | None = None  # logits become c tanh(logit / c) before the softmax (Gemma 2: 50)
    final_softcap: float | None = None  # the same on the output logits (Gemma 2: 30)
    window_layers: tuple[int, ...] | None = None  # the layers (0-based) sliding_window acts on; None: every layer
    local_rope_theta: float | None = None  # RoPE base of the window_layers, unscaled (Gemma 3); None: rope_theta

    def __post_init__(self):
        for name in ("vocab_size", "d_model", "n_heads", "n_kv_heads", "head_width", "n_layers", "d_mlp", "max_len",
                     "sliding_window"):
            value = getattr(self, name)
            if value is None and name in ("n_kv_heads", "head_width", "d_mlp", "sliding_window"):
                continue
            object.__setattr__(self, name, check_int(f"TransformerConfig.{name}", value))
        if isinstance(self.window_layers, list):  # from JSON
            object.__setattr__(self, "window_layers", tuple(self.window_layers))
        for name in ("norm_eps", "rope_theta", "init_std", "embed_scale", "attn_scale", "attn_softcap", "final_softcap",
                     "local_rope_theta"):
            value = getattr(self, name)
            if value is None and name not in ("norm_eps", "rope_theta", "init_std", "embed_scale"):
                continue
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"TransformerConfig.{name} must be a finite number > 0, got {value!r}")
        for name, value, allowed in (
            ("mlp", self.mlp, MLP_KINDS),
            ("norm", self.norm, NORM_KINDS),
            ("norm_placement", self.norm_placement, NORM_PLACEMENTS),
            ("position", self.position, POSITION_KINDS),
            ("qk_norm_scope", self.qk_norm_scope, QK_NORM_SCOPES),
            ("dtype", self.dtype, ("float32", "float64", "bfloat16", "float16")),
        ):
            if value not in allowed:
                raise ValueError(f"TransformerConfig.{name}={value!r} is not one of {allowed}")
        if self.head_width is None and self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if not (isinstance(self.rotary_fraction, (int, float)) and 0 < self.rotary_fraction <= 1):
            raise ValueError(f"TransformerConfig.rotary_fraction must be in (0, 1], got {self.rotary_fraction!r}")
        if self.n_heads % self.kv_heads:
            raise ValueError(f"n_heads={self.n_heads} is not divisible by n_kv_heads={self.kv_heads}")
        if self.position == "rope" and self.rotary_dim % 2:
            raise ValueError(f"rope needs an even head dimension, got {self.head_dim}" if self.rotary_fraction == 1
                             else f"rope needs an even number of rotated features, got {self.rotary_dim}")
        if self.parallel_residual and self.norm_placement == "post":
            raise ValueError("parallel_residual needs the norms before or after the sublayers, not norm_placement='post'")
        if self.window_layers is not None:
            if self.sliding_window is None:
                raise ValueError("TransformerConfig.window_layers needs a sliding_window")
            if not (isinstance(self.window_layers, tuple) and all(
                    isinstance(l, int) and not isinstance(l, bool) and 0 <= l < self.n_layers for l in self.window_layers)):
                raise ValueError(f"TransformerConfig.window_layers must be layer indices 0 .. {self.n_layers - 1}, "
                                 f"got {self.window_layers!r}")
        if self.local_rope_theta is not None and (self.position != "rope" or self.window_layers is None):
            raise ValueError("TransformerConfig.local_rope_theta needs position='rope' and window_layers")
        for name in ("qk_norm", "scaled_residual_init", "parallel_residual"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"TransformerConfig.{name} must be True or False, got {getattr(self, name)!r}")
        if isinstance(self.prompt_logit_bias, dict):  # from JSON
            object.__setattr__(self, "prompt_logit_bias", PromptLogitBias(**self.prompt_logit_bias))
        if isinstance(self.rope_scaling, dict):  # from JSON
            object.__setattr__(self, "rope_scaling", RopeScaling(**self.rope_scaling))
        if self.position == "rope" and self.rope_scaling is not None:  # refused here, not at the first call
            self.rope_scaling.check_frequencies(self.rotary_dim // 2)

    @property
    def kv_heads(self) -> int:
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads if self.head_width is None else self.head_width

    @property
    def rotary_dim(self) -> int:
        """The features of each head RoPE turns: the first ``int(head_dim * rotary_fraction)``."""
        return int(self.head_dim * self.rotary_fraction)

    @property
    def gated(self) -> bool:
        """Whether the MLP multiplies its hidden layer by a gate (swiglu, geglu)."""
        return self.mlp in ("swiglu", "geglu")

    @property
    def mlp_width(self) -> int:
        return 4 * self.d_model if self.d_mlp is None else self.d_mlp

    @property
    def layout(self) -> BlockLayout:
        """The block's layout, from ``norm_placement`` and ``parallel_residual``."""
        return BlockLayout(self.norm_placement, self.parallel_residual)

    @property
    def block_norms(self) -> int:
        """Norms per block (``BlockLayout.norms``): 4 with "sandwich" norms (before and after each sublayer), else 2."""
        return len(self.layout.norms())

    @property
    def n_norms(self) -> int:
        """Norms in forward order: each block's (attention's, then the MLP's), then the final norm if any."""
        return self.block_norms * self.n_layers + int(self.final_norm)

    @property
    def n_parameters(self) -> int:
        """The model's parameter count, from the config alone (before any array is made)."""
        d, hd, bias, qkv_bias = self.d_model, self.head_dim, self.bias, self.bias if self.qkv_bias is None else self.qkv_bias
        norm = d * (1 + (bias and self.norm == "layernorm"))
        qk_norm = 2 * hd if self.qk_norm_scope == "head" else (self.n_heads + self.kv_heads) * hd
        attn = (d + qkv_bias) * (self.n_heads + 2 * self.kv_heads) * hd + (self.n_heads * hd + bias) * d + qk_norm * self.qk_norm
        mlp = (1 + self.gated) * (d + bias) * self.mlp_width + (self.mlp_width + bias) * d
        tables = (self.vocab_size + self.max_len * (self.position == "learned")) * d
        return (self.n_layers * (attn + mlp + self.block_norms * norm) + tables + norm * self.final_norm
                + self.vocab_size * d * (not self.tied_embeddings))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def default_config(depth: int, *, d_model: int = 128, max_len: int = 1024, **config) -> TransformerConfig:
    """The experiments' architecture, trained or not: ``depth`` blocks of width ``d_model``, pre-LN,
    learned positions up to ``max_len`` tokens, GELU, one head per 32 features; ``config`` overrides
    any other ``TransformerConfig`` field."""
    return TransformerConfig(d_model=d_model, n_heads=max(1, d_model // 32), n_layers=depth, max_len=max_len, **config)
