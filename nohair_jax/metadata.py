"""One schema for checkpoint metadata: every key the loaders read, its type and its range.

A Hugging Face ``config.json`` (and its nested ``rope_scaling`` / ``rope_parameters``) and a GGUF
file's metadata, turned into the same keys (``checkpoints.gguf_file.hf_config``; its tokenizer arrays
by ``TOKENIZER_SCHEMA``), are held to
``CONFIG_SCHEMA`` by ``check_config`` before any arithmetic reads them, so that a value of the wrong
type or range ends in one ``CheckpointError`` naming the file, the key, the value and what was
expected, not in a ``TypeError`` or ``ZeroDivisionError`` deep inside the loader. Keys outside the
schema are not read and not checked.
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple


class CheckpointError(ValueError):
    """A checkpoint folder that cannot be loaded: the message names the folder and every problem."""


class Rule(NamedTuple):
    """What a key must hold: ``ok(value)``, in words as ``expected``."""

    expected: str
    ok: Callable[[Any], bool]


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


POSITIVE_INT = Rule("a positive integer", lambda v: _int(v) and v > 0)
POSITIVE_NUMBER = Rule("a positive finite number", lambda v: _number(v) and v > 0)
FRACTION = Rule("a number in (0, 1]", lambda v: _number(v) and 0 < v <= 1)
BOOL = Rule("true or false", lambda v: isinstance(v, bool))
TEXT = Rule("a string", lambda v: isinstance(v, str))
TEXTS = Rule("a list of strings", lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v))
POSITIVE_NUMBERS = Rule("a non-empty list of positive finite numbers",
                        lambda v: isinstance(v, list) and bool(v) and all(_number(x) and x > 0 for x in v))
MAPPING = Rule("an object (a mapping)", lambda v: isinstance(v, dict))
# GGUF's window pattern: a flag per layer, or a window on every layer but each n-th.
WINDOW_PATTERN = Rule("a positive integer or a list of true/false", lambda v: (_int(v) and v > 0) or (
    isinstance(v, list) and all(isinstance(x, bool) for x in v)))


def _or_null(rule: Rule) -> Rule:
    return Rule(f"{rule.expected} or null", lambda v: v is None or rule.ok(v))


# Every key of config.json the loaders read (every family's names), and how RoPE is given.
CONFIG_SCHEMA: dict[str, Rule] = {
    "model_type": TEXT,
    "architectures": _or_null(TEXTS),
    "dtype": _or_null(TEXT),
    "torch_dtype": _or_null(TEXT),
    # sizes
    "vocab_size": POSITIVE_INT,
    "hidden_size": POSITIVE_INT,
    "n_embd": POSITIVE_INT,
    "num_attention_heads": POSITIVE_INT,
    "n_head": POSITIVE_INT,
    "num_key_value_heads": _or_null(POSITIVE_INT),
    "head_dim": _or_null(POSITIVE_INT),
    "num_hidden_layers": POSITIVE_INT,
    "n_layer": POSITIVE_INT,
    "intermediate_size": POSITIVE_INT,
    "n_inner": _or_null(POSITIVE_INT),
    "max_position_embeddings": POSITIVE_INT,
    "n_positions": POSITIVE_INT,
    "sliding_window": _or_null(POSITIVE_INT),
    "layer_types": _or_null(TEXTS),
    "sliding_window_pattern": POSITIVE_INT,
    # numbers and switches
    "layer_norm_epsilon": POSITIVE_NUMBER,
    "layer_norm_eps": POSITIVE_NUMBER,
    "rotary_pct": FRACTION,
    "rotary_emb_base": POSITIVE_NUMBER,
    "use_parallel_residual": BOOL,
    "rms_norm_eps": POSITIVE_NUMBER,
    "rope_theta": POSITIVE_NUMBER,
    "partial_rotary_factor": FRACTION,
    "rope_scaling": _or_null(MAPPING),
    "rope_parameters": _or_null(MAPPING),
    "original_max_position_embeddings": POSITIVE_INT,  # Phi-3's, which replaces its RoPE settings' own
    "activation_function": TEXT,
    "hidden_act": TEXT,
    "hidden_activation": _or_null(TEXT),
    "query_pre_attn_scalar": POSITIVE_NUMBER,
    "attn_logit_softcapping": _or_null(POSITIVE_NUMBER),
    "final_logit_softcapping": _or_null(POSITIVE_NUMBER),
    "rope_local_base_freq": POSITIVE_NUMBER,
    "use_bidirectional_attention": _or_null(BOOL),
    "tie_word_embeddings": BOOL,
    "attention_bias": BOOL,
    "mlp_bias": BOOL,
    "use_sliding_window": BOOL,
    "max_window_layers": _or_null(Rule("a non-negative integer", lambda v: _int(v) and v >= 0)),
    "scale_attn_by_inverse_layer_idx": BOOL,
    "scale_attn_weights": BOOL,
    "add_cross_attention": BOOL,
}

# The keys of ``rope_scaling`` / ``rope_parameters`` the loaders read.
ROPE_SCHEMA: dict[str, Rule] = {
    "rope_type": TEXT,
    "type": TEXT,
    "rope_theta": POSITIVE_NUMBER,
    "partial_rotary_factor": FRACTION,
    "factor": POSITIVE_NUMBER,
    "low_freq_factor": POSITIVE_NUMBER,
    "high_freq_factor": POSITIVE_NUMBER,
    "original_max_position_embeddings": POSITIVE_INT,
    "short_factor": POSITIVE_NUMBERS,
    "long_factor": POSITIVE_NUMBERS,
    "attention_factor": POSITIVE_NUMBER,
}

# A GGUF file's tokenizer arrays (``tokenizer.ggml.*``): the vocabulary, its merges ("a b": two tokens
# joined by one space; byte-level BPE), each token's score (SentencePiece) and type.
TOKENIZER_SCHEMA: dict[str, Rule] = {
    "tokens": Rule("a list of strings", lambda v: isinstance(v, list) and bool(v) and all(isinstance(x, str) for x in v)),
    "merges": Rule("a list of strings 'a b' (two tokens, a space between)", lambda v: isinstance(v, list) and all(
        isinstance(x, str) and len(x.split(" ", 1)) == 2 and all(x.split(" ", 1)) for x in v)),
    "token_type": Rule("a list of integers", lambda v: isinstance(v, list) and all(_int(x) for x in v)),
    "scores": Rule("a list of finite numbers", lambda v: isinstance(v, list) and all(_number(x) for x in v)),
}


def check_values(values: dict, schema: dict[str, Rule], where: str, names: dict[str, str] | None = None,
                 prefix: str = "") -> None:
    """CheckpointError naming ``where``, the key (``names[key]`` where given, else ``prefix + key``), the value
    and what was expected, for the first key of ``schema`` in ``values`` that breaks its rule."""
    names = names or {}
    for key, rule in schema.items():
        if key in values and not rule.ok(values[key]):
            name = names.get(key, prefix + key)
            raise CheckpointError(f"{where}: {name} is {values[key]!r:.80}, expected {rule.expected}")


def check_config(hf: Any, where: str, names: dict[str, str] | None = None) -> dict:
    """``hf`` checked against ``CONFIG_SCHEMA`` (and ``ROPE_SCHEMA`` inside its RoPE mappings); returns it.

    ``where`` names the source in the error (a folder's config.json, a GGUF file); ``names`` maps a
    schema key to the name the source gives it (a GGUF metadata key), for the message.
    """
    names = names or {}
    if not isinstance(hf, dict):
        raise CheckpointError(f"{where}: expected a JSON object at the top level, got {type(hf).__name__}")
    check_values(hf, CONFIG_SCHEMA, where, names)
    for key in ("rope_scaling", "rope_parameters"):
        if isinstance(hf.get(key), dict):
            check_values(hf[key], ROPE_SCHEMA, where, prefix=f"{names.get(key, key)}.")
            for kind, params in hf[key].items():  # Gemma 3: one mapping per layer type
                if isinstance(params, dict):
                    check_values(params, ROPE_SCHEMA, where, prefix=f"{names.get(key, key)}.{kind}.")
    return hf
