"""RoPE settings of a Hugging Face ``config.json``, read as transformers reads them.

Two layouts: transformers >= 5 writes ``rope_parameters`` (theta inside), older configs a top-level
``rope_theta`` and ``rope_scaling`` (``type`` for ``rope_type``). Where a config has both (many
published ones do: a default ``rope_parameters`` beside the ``rope_scaling`` that matters),
``rope_scaling`` wins, as in transformers' ``convert_rope_params_to_dict``. A missing theta is the
family's ``default_theta`` (10000; Gemma 3: 1e6 global, 1e4 on its window layers).

The pretraining context of ``llama3`` and ``longrope`` (``original_max_position_embeddings``) is the RoPE
settings' own, else ``max_position_embeddings``; but transformers' ``Phi3Config`` declares a top-level one
(default 4096) that replaces the RoPE settings' (``standardize_rope_params``), so Phi-3 reads that.
"""

from __future__ import annotations

import math

from nohair_jax.checkpoints.config_rules import get, refuse
from nohair_jax.config import RopeScaling

DEFAULT_THETA = 10000.0
# transformers' rope_type names computed here (``default``: no scaling; ``nh.RopeScaling`` the others).
ROPE_KINDS = ("default", "linear", "llama3", "dynamic", "longrope")
# Families whose transformers config takes fewer: Phi3Config refuses every type but these.
FAMILY_ROPE_KINDS = {"phi3": ("default", "longrope")}
PHI3_ORIGINAL_MAX = 4096  # Phi3Config's default original_max_position_embeddings
PHI3_LONGROPE_NAMES = ("su", "yarn")  # Phi3Config reads these older rope types as longrope


def rope_params(hf: dict, default_theta: float = DEFAULT_THETA) -> dict:
    """RoPE settings in one dict (``rope_type``, ``rope_theta``, ``partial_rotary_factor`` and the
    scaling's own keys), ``rope_scaling`` before ``rope_parameters`` (module docstring)."""
    params = dict(hf.get("rope_scaling") or hf.get("rope_parameters") or {})
    params.setdefault("rope_theta", hf.get("rope_theta", default_theta))
    params.setdefault("rope_type", params.get("type", "default"))
    params.setdefault("partial_rotary_factor", hf.get("partial_rotary_factor", 1.0))
    if hf.get("model_type") == "phi3" and params["rope_type"] in PHI3_LONGROPE_NAMES:
        params["rope_type"] = "longrope"
    return params


def rope_checks(hf: dict, partial_rotary: bool = False,
                kinds: tuple[str, ...] = ROPE_KINDS) -> tuple[tuple[bool, str], ...]:
    """What a family's RoPE settings may not hold; ``partial_rotary``: whether the family turns only part
    of each head (Phi-3 may), else a ``partial_rotary_factor`` below 1 is refused; ``kinds``: the rope
    types the family computes (``FAMILY_ROPE_KINDS`` instead where transformers' config takes fewer)."""
    params = rope_params(hf)
    kind, partial = params["rope_type"], params["partial_rotary_factor"]
    kinds = FAMILY_ROPE_KINDS.get(hf.get("model_type"), kinds)
    return (
        (kind not in kinds, f"rope type {kind!r} (supported: {', '.join(kinds)})"),
        (partial != 1.0 and not partial_rotary, f"partial_rotary_factor={partial} (supported for phi3, gpt_neox)"),
        (any(isinstance(v, dict) for v in params.values()), "RoPE settings per layer type"),
    )


def rope_scaling(hf: dict, default_theta: float = DEFAULT_THETA) -> tuple[float, RopeScaling | None]:
    """(rope_theta, scaling) of a config that passed ``rope_checks``."""
    params = rope_params(hf, default_theta)
    theta, kind = params["rope_theta"], params["rope_type"]
    if kind == "default":
        return theta, None
    if kind == "linear":
        return theta, RopeScaling("linear", get(params, "factor"))
    if kind == "dynamic":  # transformers rescales past max_position_embeddings itself
        return theta, RopeScaling("dynamic", get(params, "factor"), original_max_len=get(hf, "max_position_embeddings"))
    if kind == "longrope":
        return theta, longrope(hf, params)
    return theta, RopeScaling(
        "llama3", get(params, "factor"), get(params, "low_freq_factor"), get(params, "high_freq_factor"),
        original_max_len(hf, params),
    )


def original_max_len(hf: dict, params: dict) -> int:
    """The pretraining context ``llama3`` and ``longrope`` scale from (module docstring)."""
    if hf.get("model_type") == "phi3":
        return hf.get("original_max_position_embeddings", PHI3_ORIGINAL_MAX)
    original = params.get("original_max_position_embeddings")
    return get(hf, "max_position_embeddings") if original is None else original


def longrope_attention_factor(factor: float, original: int) -> float:
    """LongRoPE's scale of cos and sin where the config gives none: ``sqrt(1 + ln factor / ln original)``
    for a context stretched ``factor`` times from ``original`` tokens, 1 for no stretch
    (transformers' ``_compute_longrope_parameters``, llama.cpp's Phi-3 converter)."""
    if factor <= 1.0:
        return 1.0
    if original < 2:
        raise ValueError(f"longrope's attention factor divides by ln original_max_position_embeddings, "
                         f"and original_max_position_embeddings is {original}")
    return math.sqrt(1 + math.log(factor) / math.log(original))


def longrope(hf: dict, params: dict) -> RopeScaling:
    """``longrope`` settings as a ``RopeScaling``: ``short_factor`` and ``long_factor`` (one per rotated
    frequency), the attention factor the config gives, else ``longrope_attention_factor`` of its ``factor``,
    else of ``max_position_embeddings / original``. Two equal factor lists and an attention factor of 1
    (how a GGUF file's ``rope_freqs.weight`` arrives) are the same at every length: ``kind="factors"``."""
    original = original_max_len(hf, params)
    short, long = get(params, "short_factor"), get(params, "long_factor")
    head_dim = hf.get("head_dim") or get(hf, "hidden_size") // get(hf, "num_attention_heads")
    count = int(head_dim * params["partial_rotary_factor"]) // 2
    where = "rope_scaling" if hf.get("rope_scaling") else "rope_parameters"
    for name, factors in (("short_factor", short), ("long_factor", long)):
        if len(factors) != count:
            raise ValueError(f"{where}.{name} has {len(factors)} entries, expected {count} "
                             f"(one per rotated frequency: half of int(head_dim * partial_rotary_factor))")
    attention = params.get("attention_factor")
    if attention is None:
        factor = params.get("factor")
        factor = get(hf, "max_position_embeddings") / original if factor is None else factor
        attention = longrope_attention_factor(factor, original)
    if short == long and attention == 1.0:
        return RopeScaling("factors", factors=short)
    return RopeScaling("longrope", original_max_len=original, factors=short, long_factors=long,
                       attention_factor=attention)


GEMMA3_THETA = {"full_attention": 1_000_000.0, "sliding_attention": 10_000.0}
GEMMA_ROPE_KINDS = ("default", "linear", "llama3")  # per-layer-type RoPE: the kinds tested on Gemma


def gemma_rope(hf: dict) -> tuple[float, RopeScaling | None, float | None]:
    """(global RoPE base, its scaling, the window layers' own base or None). Gemma 2: one RoPE as any
    family. Gemma 3: RoPE per layer type, as one mapping each in ``rope_parameters`` (transformers >= 5),
    or as ``rope_theta`` and ``rope_scaling`` for the global layers and ``rope_local_base_freq`` for the
    window layers; ``rope_scaling`` updates the global mapping, and a missing base is 1e6 global, 1e4
    local (transformers' ``Gemma3TextConfig``). Scalings: ``GEMMA_ROPE_KINDS``."""
    if hf["model_type"] != "gemma3_text":
        refuse(*rope_checks(hf, kinds=GEMMA_ROPE_KINDS))
        theta, scaling = rope_scaling(hf)
        return theta, scaling, None
    params = hf.get("rope_parameters") or {}
    refuse((bool(params) and not any(isinstance(params.get(kind), dict) for kind in GEMMA3_THETA),
            "rope_parameters not given per layer type (full_attention, sliding_attention): transformers ignores it"))
    full, local = dict(params.get("full_attention") or {}), dict(params.get("sliding_attention") or {})
    full.update(hf.get("rope_scaling") or {})
    full.setdefault("rope_theta", hf.get("rope_theta", GEMMA3_THETA["full_attention"]))
    local.setdefault("rope_theta", hf.get("rope_local_base_freq", GEMMA3_THETA["sliding_attention"]))
    kind = local.get("rope_type", local.get("type", "default"))
    refuse((kind != "default", f"rope type {kind!r} on the sliding layers (supported: default)"),
           *rope_checks({"rope_parameters": full}, kinds=GEMMA_ROPE_KINDS))
    theta, scaling = rope_scaling({"rope_parameters": full, "max_position_embeddings": hf.get("max_position_embeddings")})
    return theta, scaling, local["rope_theta"]
