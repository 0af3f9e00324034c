"""Checkpoint families: one key table and one config rule per Hugging Face ``model_type``.

A key table maps each checkpoint tensor name (after the family's prefix) onto the parameters of
``nohair_jax.model.Transformer`` (its docstring states the layout); a config rule turns the family's
``config.json`` (a dict; a GGUF file's metadata becomes one) into a ``TransformerConfig``, refusing by
name every setting the model does not compute. ``ARCHITECTURES`` lists the families that load;
docs/checkpoints.md shows the tables.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping

import numpy as np

from nohair_jax.checkpoints.config_rules import CONFIG_FILE, get, refuse
from nohair_jax.checkpoints.rope import gemma_rope, rope_checks, rope_params, rope_scaling
from nohair_jax.config import TransformerConfig
from nohair_jax.metadata import BOOL, POSITIVE_NUMBER, CheckpointError, Rule



# ---------------------------------------------------------------------------------------------
# Key tables: checkpoint name (after the architecture's prefix) -> [(model state path, convert)].
# ``{i}`` stands for the layer index. A convert turns the checkpoint tensor into the model's array
# with numpy views (transpose, slice), so the shape checks can run it on zero-stride stand-ins.


def _same(x):
    return x


def _transpose(x):
    """torch ``Linear.weight`` [out, in] -> flax kernel [in, out]."""
    return x.T


def _third(i: int) -> Callable:
    """GPT-2's fused ``c_attn`` [..., 3 D] -> its i-th part [..., D] (q, k, v in that order)."""

    def part(x):
        n = x.shape[-1] // 3
        return x[..., i * n : (i + 1) * n]

    return part


# GPT-2's Conv1D weights are stored (in, out) already: no transposes.
GPT2_KEYS: dict[str, tuple[tuple[str, Callable], ...]] = {
    "wte.weight": (("embed.embedding", _same),),
    "wpe.weight": (("pos_embed.embedding", _same),),
    "h.{i}.ln_1.weight": (("blocks.{i}.attn_norm.scale", _same),),
    "h.{i}.ln_1.bias": (("blocks.{i}.attn_norm.bias", _same),),
    "h.{i}.attn.c_attn.weight": tuple((f"blocks.{{i}}.attn.{n}.kernel", _third(j)) for j, n in enumerate("qkv")),
    "h.{i}.attn.c_attn.bias": tuple((f"blocks.{{i}}.attn.{n}.bias", _third(j)) for j, n in enumerate("qkv")),
    "h.{i}.attn.c_proj.weight": (("blocks.{i}.attn.o.kernel", _same),),
    "h.{i}.attn.c_proj.bias": (("blocks.{i}.attn.o.bias", _same),),
    "h.{i}.ln_2.weight": (("blocks.{i}.mlp_norm.scale", _same),),
    "h.{i}.ln_2.bias": (("blocks.{i}.mlp_norm.bias", _same),),
    "h.{i}.mlp.c_fc.weight": (("blocks.{i}.mlp.up.kernel", _same),),
    "h.{i}.mlp.c_fc.bias": (("blocks.{i}.mlp.up.bias", _same),),
    "h.{i}.mlp.c_proj.weight": (("blocks.{i}.mlp.down.kernel", _same),),
    "h.{i}.mlp.c_proj.bias": (("blocks.{i}.mlp.down.bias", _same),),
    "ln_f.weight": (("final_norm.scale", _same),),
    "ln_f.bias": (("final_norm.bias", _same),),
    "lm_head.weight": (("lm_head.kernel", _transpose),),
}

LLAMA_KEYS: dict[str, tuple[tuple[str, Callable], ...]] = {
    "embed_tokens.weight": (("embed.embedding", _same),),
    "layers.{i}.input_layernorm.weight": (("blocks.{i}.attn_norm.scale", _same),),
    "layers.{i}.post_attention_layernorm.weight": (("blocks.{i}.mlp_norm.scale", _same),),
    **{
        f"layers.{{i}}.self_attn.{n}_proj.{kind}": ((f"blocks.{{i}}.attn.{n}.{target}", convert),)
        for n in "qkvo"
        for kind, target, convert in (("weight", "kernel", _transpose), ("bias", "bias", _same))
    },
    **{
        f"layers.{{i}}.mlp.{n}_proj.{kind}": ((f"blocks.{{i}}.mlp.{n}.{target}", convert),)
        for n in ("gate", "up", "down")
        for kind, target, convert in (("weight", "kernel", _transpose), ("bias", "bias", _same))
    },
    "norm.weight": (("final_norm.scale", _same),),
    "lm_head.weight": (("lm_head.kernel", _transpose),),
}


# Qwen3: Llama's names and an RMSNorm on every head's q and k.
QWEN3_KEYS = {
    **LLAMA_KEYS,
    "layers.{i}.self_attn.q_norm.weight": (("blocks.{i}.attn.q_norm.scale", _same),),
    "layers.{i}.self_attn.k_norm.weight": (("blocks.{i}.attn.k_norm.scale", _same),),
}


def _plus_one(x):
    """Gemma's RMSNorm weight w -> the gain 1 + w it multiplies by (added in float64: a bfloat16 w + 1
    would round)."""
    return np.asarray(x, np.float64) + 1.0


def _rows(start: int, stop: int) -> Callable:
    """A fused torch ``Linear.weight`` [out, in] -> the flax kernel [in, stop - start] of rows start .. stop - 1."""

    def part(x):
        return x[start:stop].T

    return part


# Gemma 2 and 3: Llama's projections; four norms per block whose weights hold gain - 1; Gemma 3's QK-norm.
GEMMA_KEYS = {
    **{key: targets for key, targets in LLAMA_KEYS.items() if "layernorm" not in key and key != "norm.weight"},
    **{f"{name}.weight": ((f"{target}.scale", _plus_one),) for name, target in (
        ("layers.{i}.input_layernorm", "blocks.{i}.attn_norm"),
        ("layers.{i}.post_attention_layernorm", "blocks.{i}.attn_out_norm"),
        ("layers.{i}.pre_feedforward_layernorm", "blocks.{i}.mlp_norm"),
        ("layers.{i}.post_feedforward_layernorm", "blocks.{i}.mlp_out_norm"),
        ("layers.{i}.self_attn.q_norm", "blocks.{i}.attn.q_norm"),
        ("layers.{i}.self_attn.k_norm", "blocks.{i}.attn.k_norm"),
        ("norm", "final_norm"))},
}

# OLMo 2: Llama's projections; a norm on each sublayer's output (none on its input); QK-norm over the projection.
OLMO2_KEYS = {
    **{key: targets for key, targets in QWEN3_KEYS.items() if "layernorm" not in key},
    "layers.{i}.post_attention_layernorm.weight": (("blocks.{i}.attn_out_norm.scale", _same),),
    "layers.{i}.post_feedforward_layernorm.weight": (("blocks.{i}.mlp_out_norm.scale", _same),),
}


# StarCoder 2: Llama's projection names, with biases; a LayerNorm (with a bias) before each sublayer; a GELU MLP
# of two projections, c_fc and c_proj.
STARCODER2_KEYS = {
    **{key: targets for key, targets in LLAMA_KEYS.items()
       if "layernorm" not in key and ".mlp." not in key and key != "norm.weight"},
    **{f"{name}.{kind}": ((f"{target}.{param}", _same),)
       for name, target in (("layers.{i}.input_layernorm", "blocks.{i}.attn_norm"),
                            ("layers.{i}.post_attention_layernorm", "blocks.{i}.mlp_norm"), ("norm", "final_norm"))
       for kind, param in (("weight", "scale"), ("bias", "bias"))},
    **{f"layers.{{i}}.mlp.{name}.{kind}": ((f"blocks.{{i}}.mlp.{target}.{param}", convert),)
       for name, target in (("c_fc", "up"), ("c_proj", "down"))
       for kind, param, convert in (("weight", "kernel", _transpose), ("bias", "bias", _same))},
}


def phi3_keys(cfg: TransformerConfig) -> dict[str, tuple[tuple[str, Callable], ...]]:
    """Phi-3's key table: Llama's, with q, k, v fused in ``qkv_proj`` (rows q, then k, then v) and gate and up
    in ``gate_up_proj`` (rows gate, then up)."""
    q, kv, width = cfg.n_heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim, cfg.mlp_width
    return {
        **{key: targets for key, targets in LLAMA_KEYS.items() if not re.search(r"\.(q|k|v|gate|up)_proj\.", key)},
        "layers.{i}.self_attn.qkv_proj.weight": (("blocks.{i}.attn.q.kernel", _rows(0, q)),
                                                 ("blocks.{i}.attn.k.kernel", _rows(q, q + kv)),
                                                 ("blocks.{i}.attn.v.kernel", _rows(q + kv, q + 2 * kv))),
        "layers.{i}.mlp.gate_up_proj.weight": (("blocks.{i}.mlp.gate.kernel", _rows(0, width)),
                                               ("blocks.{i}.mlp.up.kernel", _rows(width, 2 * width))),
    }


def _neox_part(j: int, n_heads: int) -> Callable:
    """GPT-NeoX's fused ``query_key_value`` [3 D, ...] -> its j-th part (q, k, v) [D, ...], a flax kernel
    (transposed) for the weight: the rows are laid out per head, (q, k, v) of head 0, then of head 1, ..."""

    def part(x):
        rows = x.reshape(n_heads, 3, -1, *x.shape[1:])[:, j].reshape(-1, *x.shape[1:])
        return rows.T if rows.ndim == 2 else rows

    return part


def neox_keys(cfg: TransformerConfig) -> dict[str, tuple[tuple[str, Callable], ...]]:
    """GPT-NeoX's (Pythia's) key table: its fused q, k, v split per head needs the config's head count."""
    linear = lambda name, target: {  # noqa: E731
        f"layers.{{i}}.{name}.weight": ((f"blocks.{{i}}.{target}.kernel", _transpose),),
        f"layers.{{i}}.{name}.bias": ((f"blocks.{{i}}.{target}.bias", _same),)}
    norm = lambda name, target: {  # noqa: E731
        f"{name}.weight": ((f"{target}.scale", _same),), f"{name}.bias": ((f"{target}.bias", _same),)}
    return {
        "embed_in.weight": (("embed.embedding", _same),),
        **norm("layers.{i}.input_layernorm", "blocks.{i}.attn_norm"),
        **norm("layers.{i}.post_attention_layernorm", "blocks.{i}.mlp_norm"),
        **{f"layers.{{i}}.attention.query_key_value.{kind}": tuple(
            (f"blocks.{{i}}.attn.{n}.{target}", _neox_part(j, cfg.n_heads)) for j, n in enumerate("qkv"))
           for kind, target in (("weight", "kernel"), ("bias", "bias"))},
        **linear("attention.dense", "attn.o"),
        **linear("mlp.dense_h_to_4h", "mlp.up"),
        **linear("mlp.dense_4h_to_h", "mlp.down"),
        **norm("final_layer_norm", "final_norm"),
        "embed_out.weight": (("lm_head.kernel", _transpose),),
    }


def _expand(table: dict, n_layers: int) -> dict[str, tuple[tuple[str, Callable], ...]]:
    """A key table with ``{i}`` written out for layers 0 .. n_layers - 1."""
    out = {}
    for key, targets in table.items():
        for i in range(n_layers) if "{i}" in key else (None,):
            out[key.format(i=i)] = tuple((path.format(i=i), convert) for path, convert in targets)
    return out


# ---------------------------------------------------------------------------------------------
# Defaults: what transformers' config class of each model_type fills in where config.json says nothing
# (its field defaults), for every key a config rule reads. A rule then derives what transformers'
# ``__post_init__`` derives from a value that is still null (grouped heads from num_attention_heads, a head
# size from hidden_size, layer types from a window pattern). The sizes that fix the weights' shapes
# (vocabulary, widths, depth) have no default: a config without them is refused by name.

GPT2_DEFAULTS = dict(n_inner=None, n_positions=1024, layer_norm_epsilon=1e-5, activation_function="gelu_new",
                     tie_word_embeddings=True, scale_attn_by_inverse_layer_idx=False, scale_attn_weights=True,
                     add_cross_attention=False)
LLAMA_DEFAULTS = dict(num_key_value_heads=None, head_dim=None, max_position_embeddings=2048, rms_norm_eps=1e-6,
                      hidden_act="silu", tie_word_embeddings=False, attention_bias=False, mlp_bias=False)
MISTRAL_DEFAULTS = dict(num_key_value_heads=8, head_dim=None, max_position_embeddings=131072, sliding_window=4096,
                        rms_norm_eps=1e-6, hidden_act="silu", tie_word_embeddings=False)
QWEN2_DEFAULTS = dict(num_key_value_heads=32, head_dim=None, max_position_embeddings=32768, sliding_window=4096,
                      layer_types=None, rms_norm_eps=1e-6, hidden_act="silu", tie_word_embeddings=False,
                      use_sliding_window=False, max_window_layers=28)
QWEN3_DEFAULTS = dict(QWEN2_DEFAULTS, head_dim=128, attention_bias=False)
NEOX_DEFAULTS = dict(max_position_embeddings=2048, layer_norm_eps=1e-5, use_parallel_residual=True, hidden_act="gelu",
                     tie_word_embeddings=False, attention_bias=True, rotary_pct=0.25, rotary_emb_base=10000.0)
OLMO2_DEFAULTS = dict(LLAMA_DEFAULTS, rms_norm_eps=1e-5)
STARCODER2_DEFAULTS = dict(num_key_value_heads=2, max_position_embeddings=4096, norm_epsilon=1e-5,
                           hidden_act="gelu_pytorch_tanh", sliding_window=None, use_bias=True, tie_word_embeddings=True)
PHI3_DEFAULTS = dict(num_key_value_heads=None, head_dim=None, max_position_embeddings=4096, sliding_window=None,
                     rms_norm_eps=1e-5, hidden_act="silu", tie_word_embeddings=False, partial_rotary_factor=1.0)
GEMMA2_DEFAULTS = dict(num_key_value_heads=4, head_dim=256, max_position_embeddings=8192, sliding_window=4096,
                       layer_types=None, rms_norm_eps=1e-6, hidden_activation="gelu_pytorch_tanh",
                       query_pre_attn_scalar=256, attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
                       tie_word_embeddings=True, attention_bias=False, use_bidirectional_attention=None,
                       sliding_window_pattern=2)
GEMMA3_DEFAULTS = dict(GEMMA2_DEFAULTS, max_position_embeddings=131072, attn_logit_softcapping=None,
                       final_logit_softcapping=None, use_bidirectional_attention=False, sliding_window_pattern=6)


# ---------------------------------------------------------------------------------------------
# Configs: Hugging Face config.json (a dict, its family's defaults filled in) -> TransformerConfig,
# refusing what we do not compute.


GPT2_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}


def _gpt2_limit(hf: dict) -> tuple[int, str]:
    return get(hf, "n_positions"), "its learned position table (n_positions)"


def _gpt2_config(hf: dict, dtype: str, max_len: int) -> TransformerConfig:
    activation = hf["activation_function"]
    refuse(
        (activation not in GPT2_ACTIVATIONS, f"activation_function={activation!r} (supported: {sorted(GPT2_ACTIVATIONS)})"),
        (hf["scale_attn_by_inverse_layer_idx"], "scale_attn_by_inverse_layer_idx=true"),
        (not hf["scale_attn_weights"], "scale_attn_weights=false"),
        (hf["add_cross_attention"], "add_cross_attention=true"),
    )
    return TransformerConfig(
        vocab_size=get(hf, "vocab_size"), d_model=get(hf, "n_embd"), n_heads=get(hf, "n_head"),
        n_layers=get(hf, "n_layer"), d_mlp=hf["n_inner"], mlp=GPT2_ACTIVATIONS[activation], norm="layernorm",
        norm_eps=hf["layer_norm_epsilon"], position="learned", max_len=max_len,
        tied_embeddings=hf["tie_word_embeddings"], bias=True, dtype=dtype,
    )


LAYER_KINDS = ("full_attention", "sliding_attention")


def _layer_kinds(hf: dict, derived: Callable[[int], bool]) -> list[str]:
    """Each layer's attention kind: ``layer_types`` where the config gives it (checked: one known kind per
    layer), else "sliding_attention" on the layers ``derived(layer)`` marks."""
    n_layers, kinds = get(hf, "num_hidden_layers"), hf.get("layer_types")
    if kinds is None:
        return [LAYER_KINDS[derived(layer)] for layer in range(n_layers)]
    unknown = sorted(set(kinds) - set(LAYER_KINDS))
    if unknown or len(kinds) != n_layers:
        problem = f"unknown kind {unknown[0]!r} (known: {', '.join(LAYER_KINDS)})" if unknown else (
            f"{len(kinds)} entries for num_hidden_layers={n_layers}")
        raise CheckpointError(f"{CONFIG_FILE}: layer_types has {problem}")
    return kinds


def _sliding_window(hf: dict) -> tuple[int | None, tuple[int, ...] | None]:
    """(the attention window or None, the layers it acts on or None for every layer), as each family's
    modelling code in transformers reads it. Llama and OLMo 2: no window (a ``sliding_window`` key is not
    read). Mistral, Phi-3 and StarCoder 2: ``sliding_window`` on every layer (``layer_types`` is not read).
    Qwen2 and Qwen3: only with ``use_sliding_window``, on the layers ``layer_types`` marks (from
    ``max_window_layers`` on where it is null). Gemma 2 and 3: on the layers ``layer_types`` marks (where
    null: all but every ``sliding_window_pattern``-th, 2 for Gemma 2)."""
    family = hf["model_type"]
    if family in ("qwen2", "qwen3"):
        kinds = _layer_kinds(hf, lambda layer: layer >= hf["max_window_layers"])
        window = hf["sliding_window"] if hf["use_sliding_window"] else None
    elif family in ("gemma2", "gemma3_text"):
        kinds = _layer_kinds(hf, lambda layer: (layer + 1) % hf["sliding_window_pattern"] != 0)
        window = hf["sliding_window"]
    elif family in ("mistral", "phi3", "starcoder2"):
        kinds, window = [LAYER_KINDS[1]] * get(hf, "num_hidden_layers"), hf["sliding_window"]
    else:
        return None, None
    layers = tuple(l for l, kind in enumerate(kinds) if kind == "sliding_attention")
    if window is None and layers and hf.get("layer_types") is not None:  # transformers' mask fails on these
        why = "sliding_window is null" if hf["sliding_window"] is None else "use_sliding_window is false"
        raise CheckpointError(f"{CONFIG_FILE}: layer_types marks {len(layers)} window layer(s), but {why}")
    if window is None or not layers:
        return None, None
    return window, None if len(layers) == len(kinds) else layers


def _context_limit(hf: dict) -> tuple[int, str]:
    return get(hf, "max_position_embeddings"), "its context (max_position_embeddings)"


def _head_dim(hf: dict) -> int:
    """The head size: ``head_dim``, or hidden_size / num_attention_heads where it is null."""
    d_model, n_heads = get(hf, "hidden_size"), get(hf, "num_attention_heads")
    head_dim = hf.get("head_dim") or d_model // n_heads
    if head_dim == 0:
        raise CheckpointError(f"{CONFIG_FILE}: hidden_size {d_model} is smaller than num_attention_heads {n_heads}")
    return head_dim


def _llama_config(hf: dict, dtype: str, max_len: int) -> TransformerConfig:
    """Llama, Mistral, Qwen2, Qwen3, and the base of OLMo 2's and Phi-3's."""
    d_model, n_heads, head_dim = get(hf, "hidden_size"), get(hf, "num_attention_heads"), _head_dim(hf)
    if hf["model_type"] == "qwen2":  # biases on q, k, v only
        bias, qkv_bias = False, True
    else:  # Llama's attention_bias covers q, k, v and o; mlp_bias the three MLP projections
        bias, qkv_bias = bool(hf.get("attention_bias")), None
    activation = hf["hidden_act"]
    refuse(
        (activation != "silu", f"hidden_act={activation!r} (supported: 'silu')"),
        (
            hf["model_type"] == "llama" and bool(hf["mlp_bias"]) != bias,
            f"attention_bias={hf.get('attention_bias')} with mlp_bias={hf.get('mlp_bias')} (they must agree)",
        ),
        *rope_checks(hf, partial_rotary=hf["model_type"] == "phi3"),
    )
    theta, scaling = rope_scaling(hf)
    window, layers = _sliding_window(hf)
    return TransformerConfig(
        vocab_size=get(hf, "vocab_size"), d_model=d_model, n_heads=n_heads,
        n_kv_heads=hf["num_key_value_heads"] or n_heads, n_layers=get(hf, "num_hidden_layers"),
        d_mlp=get(hf, "intermediate_size"), mlp="swiglu", norm="rmsnorm", norm_eps=hf["rms_norm_eps"],
        position="rope", rope_theta=theta, rope_scaling=scaling, max_len=max_len,
        tied_embeddings=hf["tie_word_embeddings"], bias=bias, qkv_bias=qkv_bias, dtype=dtype,
        sliding_window=window if window is not None and window < max_len else None,
        window_layers=layers if window is not None and window < max_len else None,
        head_width=None if head_dim * n_heads == d_model else head_dim, qk_norm=hf["model_type"] == "qwen3",
        rotary_fraction=rope_params(hf)["partial_rotary_factor"],
    )


def _olmo2_config(hf: dict, dtype: str, max_len: int) -> TransformerConfig:
    """OLMo 2: Llama's, with a norm on each sublayer's output instead of its input and QK-norm over the
    whole q and k projections."""
    refuse((hf["attention_bias"], "attention_bias=true (OLMo 2's MLP has no biases: not built)"))
    return dataclasses.replace(_llama_config(hf, dtype, max_len), norm_placement="output", qk_norm=True,
                               qk_norm_scope="projection")


GEMMA_ACTIVATIONS = ("gelu_pytorch_tanh", "gelu_tanh")


def _gemma_config(hf: dict, dtype: str, max_len: int) -> TransformerConfig:
    """Gemma 2 and 3: RMSNorm before and after each sublayer, GeGLU, the embedding times sqrt(d_model),
    logits scaled by ``query_pre_attn_scalar^-1/2``, a sliding window on the layers ``layer_types`` marks;
    Gemma 2's soft caps, Gemma 3's QK-norm and RoPE base of its own on the window layers."""
    d_model, n_heads, head_dim = get(hf, "hidden_size"), get(hf, "num_attention_heads"), _head_dim(hf)
    activation = hf["hidden_activation"]  # transformers' Gemma reads this one, not hidden_act
    refuse(
        (activation not in GEMMA_ACTIVATIONS, f"hidden_activation={activation!r} (supported: {GEMMA_ACTIVATIONS})"),
        (hf["attention_bias"], "attention_bias=true"),
        (bool(hf["use_bidirectional_attention"]), "use_bidirectional_attention=true (not causal)"),
    )
    theta, scaling, local_theta = gemma_rope(hf)
    window, window_layers = _sliding_window(hf)
    window_layers = window_layers or (tuple(range(get(hf, "num_hidden_layers"))) if window else None)
    return TransformerConfig(
        vocab_size=get(hf, "vocab_size"), d_model=d_model, n_heads=n_heads,
        n_kv_heads=hf["num_key_value_heads"] or n_heads, head_width=head_dim, n_layers=get(hf, "num_hidden_layers"),
        d_mlp=get(hf, "intermediate_size"), mlp="geglu", norm="rmsnorm", norm_placement="sandwich",
        norm_eps=hf["rms_norm_eps"], position="rope", rope_theta=theta, rope_scaling=scaling, max_len=max_len,
        tied_embeddings=hf["tie_word_embeddings"], bias=False, dtype=dtype, embed_scale=d_model ** 0.5,
        attn_scale=hf["query_pre_attn_scalar"] ** -0.5, attn_softcap=hf["attn_logit_softcapping"],
        final_softcap=hf["final_logit_softcapping"], sliding_window=window, window_layers=window_layers,
        local_rope_theta=local_theta if window_layers else None, qk_norm=hf["model_type"] == "gemma3_text",
    )


NEOX_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_fast": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
                    "relu": "relu"}


def _neox_config(hf: dict, dtype: str, max_len: int) -> TransformerConfig:
    """GPT-NeoX (Pythia): a parallel block (``use_parallel_residual``, or GPT-2's order), RoPE on the first
    ``rotary_pct`` (``partial_rotary_factor``) of each head, LayerNorm with biases, an untied output."""
    activation = hf["hidden_act"]
    params = rope_params(dict(hf, rope_theta=hf.get("rope_theta", hf["rotary_emb_base"]),
                              partial_rotary_factor=hf.get("partial_rotary_factor", hf["rotary_pct"])))
    kind = params["rope_type"]
    refuse(
        (activation not in NEOX_ACTIVATIONS, f"hidden_act={activation!r} (supported: {sorted(NEOX_ACTIVATIONS)})"),
        (kind != "default", f"rope type {kind!r} (supported for gpt_neox: default)"),
        (not hf["attention_bias"], "attention_bias=false"),
    )
    return TransformerConfig(
        vocab_size=get(hf, "vocab_size"), d_model=get(hf, "hidden_size"), n_heads=get(hf, "num_attention_heads"),
        n_layers=get(hf, "num_hidden_layers"), d_mlp=get(hf, "intermediate_size"), mlp=NEOX_ACTIVATIONS[activation],
        norm="layernorm", norm_eps=hf["layer_norm_eps"], position="rope", rope_theta=params["rope_theta"],
        rotary_fraction=params["partial_rotary_factor"], max_len=max_len, bias=True,
        tied_embeddings=hf["tie_word_embeddings"], parallel_residual=hf["use_parallel_residual"], dtype=dtype,
    )


def _starcoder2_config(hf: dict, dtype: str, max_len: int) -> TransformerConfig:
    """StarCoder 2: pre-LN with LayerNorm, biases on every projection (``use_bias``; its LayerNorms keep theirs
    either way), a GELU MLP, RoPE over whole heads, grouped heads, a window on every layer where
    ``sliding_window`` is set."""
    d_model, n_heads, head_dim = get(hf, "hidden_size"), get(hf, "num_attention_heads"), _head_dim(hf)
    activation = hf["hidden_act"]
    refuse(
        (activation not in NEOX_ACTIVATIONS, f"hidden_act={activation!r} (supported: {sorted(NEOX_ACTIVATIONS)})"),
        (not hf["use_bias"], "use_bias=false (LayerNorm with a bias beside projections without one: not built)"),
        *rope_checks(hf),
    )
    theta, scaling = rope_scaling(hf)
    window, layers = _sliding_window(hf)
    window = window if window is not None and window < max_len else None
    return TransformerConfig(
        vocab_size=get(hf, "vocab_size"), d_model=d_model, n_heads=n_heads,
        n_kv_heads=hf["num_key_value_heads"] or n_heads, n_layers=get(hf, "num_hidden_layers"),
        d_mlp=get(hf, "intermediate_size"), mlp=NEOX_ACTIVATIONS[activation], norm="layernorm",
        norm_eps=hf["norm_epsilon"], position="rope", rope_theta=theta, rope_scaling=scaling, max_len=max_len,
        tied_embeddings=hf["tie_word_embeddings"], bias=True, dtype=dtype, sliding_window=window,
        window_layers=layers if window is not None else None,
        head_width=None if head_dim * n_heads == d_model else head_dim,
    )


@dataclasses.dataclass(frozen=True)
class Architecture:
    """How one Hugging Face ``model_type`` maps onto ``Transformer``.

    limit: hf config -> (longest sequence the model computes exactly, why).
    config: (hf config, dtype, max_len) -> TransformerConfig.
    keys: the key table (checkpoint names without ``prefix``), or a function of the model's config to it.
    ignored: checkpoint names that are not weights: attention-mask buffers, cached rotary
      frequencies, and the output embedding of a tied model (a copy of the input embedding).
    prefix: what a ``*ForCausalLM`` puts before the base model's names (``lm_head`` has none).
    defaults: config key -> the value transformers' config class gives it where config.json has no such key.
    gguf: the ``general.architecture`` llama.cpp writes for the family's GGUF files, where the GGUF reader
      (``gguf_file``) takes them; None where it does not.
    schema: the rules of the config keys only this family reads (``metadata.CONFIG_SCHEMA`` holds the shared
      ones); ``build.checked_config`` holds a config to both before anything reads it.
    """

    limit: Callable[[dict], tuple[int, str]]
    config: Callable[[dict, str, int], TransformerConfig]
    keys: dict | Callable[[TransformerConfig], dict]
    ignored: str
    prefix: str
    defaults: dict
    gguf: str | None = None
    schema: Mapping[str, Rule] = dataclasses.field(default_factory=dict)

    def filled(self, hf: dict) -> dict:
        """``hf`` with the family's defaults where it has no such key (a key written null stays null)."""
        return {**self.defaults, **hf}


GPT2 = Architecture(
    _gpt2_limit, _gpt2_config, GPT2_KEYS, ignored=r"h\.\d+\.attn\.(bias|masked_bias)|lm_head\.weight", prefix="transformer.",
    defaults=GPT2_DEFAULTS,
)
LLAMA = Architecture(
    _context_limit, _llama_config, LLAMA_KEYS,
    ignored=r"layers\.\d+\.self_attn\.rotary_emb\.inv_freq|lm_head\.weight", prefix="model.", defaults=LLAMA_DEFAULTS,
)
GPT_NEOX = Architecture(
    _context_limit, _neox_config, neox_keys,
    ignored=r"layers\.\d+\.attention\.(bias|masked_bias|rotary_emb\.inv_freq)", prefix="gpt_neox.",
    defaults=NEOX_DEFAULTS,
)
GEMMA2 = dataclasses.replace(LLAMA, config=_gemma_config, keys=GEMMA_KEYS, defaults=GEMMA2_DEFAULTS, gguf="gemma2")
ARCHITECTURES = {
    "gpt2": GPT2, "llama": dataclasses.replace(LLAMA, gguf="llama"),
    "mistral": dataclasses.replace(LLAMA, defaults=MISTRAL_DEFAULTS),  # llama.cpp writes Mistral's files as llama
    "qwen2": dataclasses.replace(LLAMA, defaults=QWEN2_DEFAULTS, gguf="qwen2"),
    "qwen3": dataclasses.replace(LLAMA, keys=QWEN3_KEYS, defaults=QWEN3_DEFAULTS, gguf="qwen3"),
    "gpt_neox": dataclasses.replace(GPT_NEOX, gguf="gptneox"),
    "olmo2": dataclasses.replace(LLAMA, config=_olmo2_config, keys=OLMO2_KEYS, defaults=OLMO2_DEFAULTS, gguf="olmo2"),
    "phi3": dataclasses.replace(LLAMA, keys=phi3_keys, defaults=PHI3_DEFAULTS, gguf="phi3"),
    "gemma2": GEMMA2, "gemma3_text": dataclasses.replace(GEMMA2, defaults=GEMMA3_DEFAULTS, gguf="gemma3"),
    "starcoder2": dataclasses.replace(LLAMA, config=_starcoder2_config, keys=STARCODER2_KEYS,
                                      defaults=STARCODER2_DEFAULTS, schema=dict(norm_epsilon=POSITIVE_NUMBER, use_bias=BOOL)),
}


def architecture(hf: dict) -> Architecture:
    """The ``Architecture`` of a config's ``model_type``; CheckpointError naming it if unsupported."""
    kind = hf.get("model_type")
    if kind not in ARCHITECTURES:
        names = ", ".join(hf.get("architectures") or [])
        raise CheckpointError(
            f"model_type {kind!r}{f' ({names})' if names else ''} is not supported; "
            f"supported: {', '.join(sorted(ARCHITECTURES))}"
        )
    return ARCHITECTURES[kind]
