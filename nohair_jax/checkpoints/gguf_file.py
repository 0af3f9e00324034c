"""GGUF files (llama.cpp's format) as a ``Transformer`` (their tokenizer: ``gguf_tokenizer``).

    model, tokenizer = nh.load_checkpoint("SmolLM2-135M-Instruct.Q4_1.gguf")   # or "smollm2-135m"

A GGUF file holds metadata (key -> value) and tensors, most of them quantized in blocks. Its
header is parsed here (``GGUFFile``), its tensors dequantized with the ``gguf`` package
(llama.cpp's own Python code, numpy only), and the result handed to the same machinery as a
Hugging Face folder (``nohair_jax.checkpoints``):

- the metadata becomes a Hugging Face config dict (``hf_config``), so the same config rules,
  refusals and sequence-length checks apply; what a file does not say is taken as llama.cpp
  takes it (``FAMILY_DEFAULTS``: Gemma's window patterns and soft caps, ...);
- tensor names map onto the same key tables through one table (``GGUF_NAMES``: GGUF name ->
  Hugging Face name) and one per family where its names differ (``FAMILY_NAMES``), shapes are
  given in Hugging Face's layout (GGUF lists dimensions innermost first), and every tensor is
  checked (name, shape, type) before any is read;
- each tensor is dequantized on the host to float32 (``gguf.quants.dequantize``), and what
  llama.cpp's converter changed is undone: the row permutation of Llama's q and k projections (it
  interleaves the two RoPE halves; the other families are not permuted), Gemma's norm weights
  stored as 1 + w, GPT-NeoX's fused q, k, v put in another order.

The dequantized weights are the model: whatever is measured on a quantized file is a measurement
of that quantized model (SmolLM2-135M-Instruct at Q4_1, say), not of the original float weights.
"""

from __future__ import annotations

import dataclasses
import functools
import mmap
import re
import struct
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from nohair_jax.checkpoints.build import build_model, checked_config
from nohair_jax.checkpoints.families import ARCHITECTURES
from nohair_jax.checkpoints.rope import longrope_attention_factor
from nohair_jax.metadata import CheckpointError
from nohair_jax.metadata import POSITIVE_INT, POSITIVE_NUMBER, TEXT, WINDOW_PATTERN, check_config, check_values

GGUF_MAGIC = b"GGUF"
# Supported architectures (general.architecture) -> the Hugging Face model_type they load as (the family table's).
GGUF_ARCHITECTURES = {a.gguf: name for name, a in ARCHITECTURES.items() if a.gguf is not None}
# Tensor types read (dequantized with gguf.quants); each is tested against transformers.
GGUF_TYPES = ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")

# GGUF tensor name -> Hugging Face name without the ``model.`` prefix; ``{i}`` is the layer.
GGUF_NAMES = {
    "token_embd.weight": "embed_tokens.weight",
    "output_norm.weight": "norm.weight",
    "output.weight": "lm_head.weight",
    "blk.{i}.attn_norm.weight": "layers.{i}.input_layernorm.weight",
    "blk.{i}.ffn_norm.weight": "layers.{i}.post_attention_layernorm.weight",
    **{f"blk.{{i}}.attn_{n}.{kind}": f"layers.{{i}}.self_attn.{n}_proj.{kind}" for n in "qkv" for kind in ("weight", "bias")},
    **{f"blk.{{i}}.attn_output.{kind}": f"layers.{{i}}.self_attn.o_proj.{kind}" for kind in ("weight", "bias")},
    **{f"blk.{{i}}.ffn_{n}.{kind}": f"layers.{{i}}.mlp.{n}_proj.{kind}" for n in ("gate", "up", "down") for kind in ("weight", "bias")},
    **{f"blk.{{i}}.attn_{n}_norm.weight": f"layers.{{i}}.self_attn.{n}_norm.weight" for n in "qk"},  # Qwen3, Gemma 3, OLMo 2
}
# Where a family's Hugging Face names for GGUF tensors are not Llama's (llama.cpp's gguf.TensorNameMap): the
# norms on the sublayers' outputs (Gemma's norm before the MLP is "ffn_norm", Llama's name for its second
# norm), Phi-3's fused projections, GPT-NeoX's names. A Hugging Face name listed here is no longer read
# from the GGUF name ``GGUF_NAMES`` gives it.
_OUTPUT_NORMS = {"blk.{i}.post_attention_norm.weight": "layers.{i}.post_attention_layernorm.weight",
                 "blk.{i}.post_ffw_norm.weight": "layers.{i}.post_feedforward_layernorm.weight"}
_GEMMA_NAMES = {**_OUTPUT_NORMS, "blk.{i}.ffn_norm.weight": "layers.{i}.pre_feedforward_layernorm.weight"}
FAMILY_NAMES = {
    "gemma2": _GEMMA_NAMES,
    "gemma3_text": _GEMMA_NAMES,
    "olmo2": _OUTPUT_NORMS,
    "phi3": {"blk.{i}.attn_qkv.weight": "layers.{i}.self_attn.qkv_proj.weight",
             "blk.{i}.ffn_up.weight": "layers.{i}.mlp.gate_up_proj.weight"},
    "gpt_neox": {
        "token_embd.weight": "embed_in.weight", "output.weight": "embed_out.weight",
        **{f"{gguf_name}.{kind}": f"{hf_name}.{kind}" for kind in ("weight", "bias") for gguf_name, hf_name in (
            ("output_norm", "final_layer_norm"), ("blk.{i}.attn_norm", "layers.{i}.input_layernorm"),
            ("blk.{i}.ffn_norm", "layers.{i}.post_attention_layernorm"),
            ("blk.{i}.attn_qkv", "layers.{i}.attention.query_key_value"), ("blk.{i}.attn_output", "layers.{i}.attention.dense"),
            ("blk.{i}.ffn_up", "layers.{i}.mlp.dense_h_to_4h"), ("blk.{i}.ffn_down", "layers.{i}.mlp.dense_4h_to_h"))},
    },
}

# GGUF metadata key (after "<architecture>.") -> Hugging Face config key, for the settings a file must have.
REQUIRED_METADATA = {
    "block_count": "num_hidden_layers",
    "embedding_length": "hidden_size",
    "feed_forward_length": "intermediate_size",
    "attention.head_count": "num_attention_heads",
    "context_length": "max_position_embeddings",
}
# The norm's epsilon, which a file must also have: GPT-NeoX's LayerNorm, every other family's RMSNorm.
NORM_EPSILON = {"gptneox": "attention.layer_norm_epsilon"}
RMS_EPSILON = "attention.layer_norm_rms_epsilon"


# ---------------------------------------------------------------------------------------------
# The file.


def _gguf():
    try:
        import gguf
    except ImportError:
        raise ImportError("reading GGUF files needs the gguf package: pip install 'nohair-jax[hf]'") from None
    return gguf


class GGUFTensor(NamedTuple):
    """One tensor of a GGUF file: ``shape`` in the file's order (innermost dimension first),
    ``data`` a read-only view of its bytes in the file, shaped as ``gguf.quants.dequantize`` takes it."""

    name: str
    tensor_type: Any  # gguf.GGMLQuantizationType
    shape: tuple[int, ...]
    data: np.ndarray


# GGUF metadata value types (the gguf spec's numbering) -> struct code; 7 bool, 8 string, 9 array.
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 10: "Q", 11: "q", 12: "d"}
_BOOL, _STRING, _ARRAY = 7, 8, 9
# Tensor types stored element by element (as numpy reads them); every other type is blocks of bytes.
_UNBLOCKED = {"F16": "<f2", "F32": "<f4", "F64": "<f8", "I8": "<i1", "I16": "<i2", "I32": "<i4", "I64": "<i8"}


class GGUFFile:
    """A GGUF file's metadata (``fields``: key -> Python value) and tensors (``tensors``, in file
    order), its tensor data memory-mapped. Version 2 and 3, little-endian, as llama.cpp writes them.

    The header is parsed here rather than by ``gguf.GGUFReader``, which builds a NumPy view for
    every element of every metadata array: 3.1 s for SmolLM2's file (its 49152-token vocabulary
    and merges), against 0.29 s here, measured side by side. The tests compare the two field by
    field and tensor by tensor. The tensor types and their block sizes are the gguf package's.
    """

    def __init__(self, path: str):
        self.path = path
        with open(path, "rb") as f:
            self._buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self._pos = 0
        magic, version = bytes(self._take(4)), self._read("I")
        if magic != GGUF_MAGIC or version not in (2, 3):
            raise ValueError(f"GGUF version {version} (this reader reads versions 2 and 3, little-endian)")
        n_tensors, n_fields = self._read("Q"), self._read("Q")
        self.fields: dict[str, Any] = {}
        for _ in range(n_fields):
            key = self._string()
            self.fields[key] = self._value(self._read("I"))
        infos = []
        for _ in range(n_tensors):
            name, n_dims = self._string(), self._read("I")
            dims = tuple(self._read("Q") for _ in range(n_dims))
            infos.append((name, dims, self._read("I"), self._read("Q")))
        alignment = self.fields.get("general.alignment", 32)
        if not (isinstance(alignment, int) and alignment > 0 and alignment & (alignment - 1) == 0):  # llama.cpp's rule
            raise ValueError(f"general.alignment is {alignment!r}, not a power of 2")
        start = -(-self._pos // alignment) * alignment
        gguf = _gguf()
        self.tensors = [self._tensor(gguf, start, *info) for info in infos]
        if len({t.name for t in self.tensors}) != len(self.tensors):
            raise ValueError("a tensor name appears twice")

    def _take(self, n: int) -> memoryview:
        if self._pos + n > len(self._buf):
            raise ValueError(f"the file ends at byte {len(self._buf)}, inside its header")
        chunk = memoryview(self._buf)[self._pos : self._pos + n]
        self._pos += n
        return chunk

    def _read(self, code: str):
        """One little-endian value of struct type ``code``."""
        (value,) = struct.unpack("<" + code, self._take(struct.calcsize(code)))
        return value

    def _string(self) -> str:
        return str(self._take(self._read("Q")), "utf-8")

    def _value(self, kind: int):
        if kind in _SCALARS:
            return self._read(_SCALARS[kind])
        if kind == _BOOL:
            return bool(self._read("B"))
        if kind == _STRING:
            return self._string()
        if kind == _ARRAY:
            item, count = self._read("I"), self._read("Q")
            if item in _SCALARS:
                return list(struct.unpack(f"<{count}{_SCALARS[item]}", self._take(count * struct.calcsize(_SCALARS[item]))))
            return [self._value(item) for _ in range(count)]
        raise ValueError(f"unknown metadata value type {kind}")

    def _tensor(self, gguf, start: int, name: str, dims: tuple[int, ...], kind: int, offset: int) -> GGUFTensor:
        qtype = gguf.GGMLQuantizationType(kind)
        block, type_size = gguf.GGML_QUANT_SIZES[qtype]
        n_bytes = int(np.prod(dims, dtype=np.int64)) * type_size // block
        first = start + offset
        if first + n_bytes > len(self._buf):
            raise ValueError(f"tensor {name} ends past the end of the file")
        raw = np.frombuffer(self._buf, dtype=np.uint8, count=n_bytes, offset=first)
        numpy_shape = tuple(reversed(dims))
        if qtype.name in _UNBLOCKED:
            data = raw.view(_UNBLOCKED[qtype.name]).reshape(numpy_shape)
        else:  # blocks of bytes, as gguf.quants.dequantize takes them
            data = raw.reshape(gguf.quant_shape_to_byte_shape(numpy_shape, qtype))
        return GGUFTensor(name, qtype, dims, data)


@functools.lru_cache(maxsize=2)
def _open(path: str, mtime_ns: int, size: int) -> GGUFFile:
    """The parsed file, cached so the tokenizer and the weights share one parse."""
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != GGUF_MAGIC:
        raise CheckpointError(f"{path} is not a GGUF file (it starts with {magic!r}, not {GGUF_MAGIC!r})")
    try:
        return GGUFFile(path)
    except Exception as err:  # a damaged or short file: values, types, text that is not UTF-8
        raise CheckpointError(f"{path} is a damaged or truncated GGUF file ({type(err).__name__}: {err})") from None


def open_gguf(path: str | Path) -> GGUFFile:
    """The ``GGUFFile`` of ``path``; CheckpointError naming the file if it is not a readable GGUF file."""
    path = Path(path)
    stat = path.stat()
    return _open(str(path.resolve()), stat.st_mtime_ns, stat.st_size)


_MISSING = object()


def metadata(reader: GGUFFile, key: str, default: Any = _MISSING) -> Any:
    """The value of metadata ``key`` as Python (str, number, bool or list), or ``default``."""
    if key not in reader.fields:
        if default is _MISSING:
            raise CheckpointError(f"{reader.path} has no metadata {key!r}")
        return default
    return reader.fields[key]


def describe(path: str | Path) -> dict:
    """What the file is, for reports: its name, architecture, and tensor count per type."""
    reader = open_gguf(path)
    types: dict[str, int] = {}
    for tensor in reader.tensors:
        types[tensor.tensor_type.name] = types.get(tensor.tensor_type.name, 0) + 1
    return dict(
        file=Path(path).name, name=metadata(reader, "general.name", None),
        architecture=metadata(reader, "general.architecture", None), tensor_types=types,
        computed_as="dequantized to float32 on loading: the quantized weights are the model measured",
    )


# ---------------------------------------------------------------------------------------------
# Metadata -> config, names -> key table.


# Metadata read where present (GGUF name without the architecture -> config key); GGUF's own keys,
# which no config.json has, with their rules.
OPTIONAL_METADATA = {
    "attention.key_length": "head_dim",
    "attention.head_count_kv": "num_key_value_heads",
    "attention.layer_norm_rms_epsilon": "rms_norm_eps",
    "attention.layer_norm_epsilon": "layer_norm_eps",
    "rope.freq_base": "rope_theta",
    "rope.scaling.original_context_length": "original_max_position_embeddings",
    "vocab_size": "vocab_size",
    "attention.sliding_window": "sliding_window",
    "attn_logit_softcapping": "attn_logit_softcapping",
    "final_logit_softcapping": "final_logit_softcapping",
    "use_parallel_residual": "use_parallel_residual",
}
GGUF_ONLY = {
    "attention.value_length": POSITIVE_INT,
    "rope.dimension_count": POSITIVE_INT,
    "rope.scaling.type": TEXT,
    "rope.scaling.factor": POSITIVE_NUMBER,
    "rope.scaling.attn_factor": POSITIVE_NUMBER,
    "attention.sliding_window_pattern": WINDOW_PATTERN,
}
# What llama.cpp assumes where a family's file does not say (llama-model.cpp): Gemma 2's soft caps and window
# of 4096, the window on every second layer (Gemma 2) or on five of every six (Gemma 3), Gemma 3's RoPE base of
# 10000 on its window layers.
FAMILY_DEFAULTS = {
    "gemma2": dict(attn_logit_softcapping=50.0, final_logit_softcapping=30.0, sliding_window=4096, window_pattern=2),
    "gemma3": dict(window_pattern=6, rope_local_base_freq=10000.0),
}
# Metadata llama.cpp requires of a family beyond the sizes and the epsilon (load_hparams reads it with no default).
FAMILY_REQUIRED = {"gptneox": ("use_parallel_residual",)}
# Each family's MLP activation (GGUF does not say): SiLU-gated unless listed.
ACTIVATIONS = {"gemma2": "gelu_pytorch_tanh", "gemma3": "gelu_pytorch_tanh", "gptneox": "gelu"}
# Tensors of RoPE frequency divisors, by the architecture whose files llama.cpp reads them in (llama-model.cpp):
# Llama 3.1's llama3 scaling as one divisor per frequency, Phi-3's longrope as a short and a long set.
ROPE_FACTORS = {"llama": ("rope_freqs.weight",), "phi3": ("rope_factors_short.weight", "rope_factors_long.weight")}


def hf_config(reader, where: str) -> dict:
    """The file's metadata as a Hugging Face config dict (what ``checkpoints.checked_config`` reads),
    every value held to ``metadata.CONFIG_SCHEMA`` (errors name the GGUF key) before it is used."""
    arch = metadata(reader, "general.architecture")
    if not isinstance(arch, str) or arch not in GGUF_ARCHITECTURES:
        raise CheckpointError(f"{where}: architecture {arch!r:.80} is not supported; supported: "
                              f"{', '.join(GGUF_ARCHITECTURES)}")
    key = lambda name: f"{arch}.{name}"  # noqa: E731
    required = [*REQUIRED_METADATA, NORM_EPSILON.get(arch, RMS_EPSILON)]
    missing = [key(name) for name in required if key(name) not in reader.fields]
    if missing:
        raise CheckpointError(f"{where} lacks metadata the model needs: {', '.join(missing)}")
    read = {**REQUIRED_METADATA, **OPTIONAL_METADATA}
    hf = {hf_key: reader.fields[key(name)] for name, hf_key in read.items() if key(name) in reader.fields}
    if hf.get("sliding_window") == 0 and arch != "gemma2":  # no window, as llama.cpp reads 0 (Phi-3's converter
        del hf["sliding_window"]  # writes it); Gemma 2's would be a window of 0, masking every key: refused as such
    if arch == "olmo2" and hf.get("sliding_window"):  # llama.cpp puts it on 3 layers of 4 (OLMo 3); not built
        raise CheckpointError(f"{where}: {key('attention.sliding_window')} is {hf['sliding_window']} (OLMo 3's window "
                              "on three layers of four): not supported")
    if hf.get("final_logit_softcapping") == 0 and arch == "gemma3":  # llama.cpp's Gemma 3 caps nothing at 0
        del hf["final_logit_softcapping"]
    check_config(hf, where, names={hf_key: key(name) for name, hf_key in read.items()})
    own = {name: reader.fields[key(name)] for name in GGUF_ONLY if key(name) in reader.fields}
    check_values(own, GGUF_ONLY, where, names={name: key(name) for name in GGUF_ONLY})
    missing = [key(name) for name in FAMILY_REQUIRED.get(arch, ()) if key(name) not in reader.fields]
    if missing:  # after the values: a wrong value is named first, as for the keys every family needs
        raise CheckpointError(f"{where} lacks metadata the model needs: {', '.join(missing)}")
    names = {t.name for t in reader.tensors}
    head_dim = hf.get("head_dim") or hf["hidden_size"] // hf["num_attention_heads"]
    if head_dim == 0:
        raise CheckpointError(f"{where}: {key('embedding_length')} {hf['hidden_size']} is smaller than "
                              f"{key('attention.head_count')} {hf['num_attention_heads']}")
    value_dim = own.get("attention.value_length", hf["hidden_size"] // hf["num_attention_heads"])  # llama.cpp's default
    if value_dim != head_dim:
        raise CheckpointError(f"{where}: value heads of {value_dim} features and key heads of {head_dim} "
                              f"({key('attention.value_length')}, {key('attention.key_length')}; where absent, "
                              f"embedding_length / head_count, as llama.cpp takes them): heads of different sizes "
                              f"are not supported")
    defaults = dict(FAMILY_DEFAULTS.get(arch, {}))
    pattern = own.get("attention.sliding_window_pattern", defaults.pop("window_pattern", None))
    # The pretraining context is the context where the file does not say (llama.cpp's n_ctx_orig_yarn); only
    # Phi-3's config rule reads it at the top level (as transformers' Phi3Config), so only there is it written.
    original = hf.get("original_max_position_embeddings", hf["max_position_embeddings"])
    hf = {**defaults, **({"original_max_position_embeddings": original} if arch == "phi3" else {}), **hf}
    hf.update(
        model_type=GGUF_ARCHITECTURES[arch],
        head_dim=head_dim,
        num_key_value_heads=hf.get("num_key_value_heads") or hf["num_attention_heads"],
        rope_theta=float(hf.get("rope_theta") or 10000.0),
        # RoPE on fewer dimensions than a head has, or scalings they do not compute, are refused by the config rules.
        partial_rotary_factor=own.get("rope.dimension_count", head_dim) / head_dim,
        rope_scaling=_rope_scaling(reader, arch, own, own.get("rope.dimension_count", head_dim),
                                   hf["max_position_embeddings"], original, where),
        vocab_size=hf.get("vocab_size") or _vocab_rows(reader),
        tie_word_embeddings="output.weight" not in names,
        attention_bias=bool(names & {"blk.0.attn_q.bias", "blk.0.attn_qkv.bias"}),
        mlp_bias="blk.0.ffn_up.bias" in names,
        sliding_window=hf.get("sliding_window"),
        hidden_act=ACTIVATIONS.get(arch, "silu"),
    )
    if arch.startswith("gemma"):
        # llama.cpp's logit scale: 1/sqrt(head size), but d_model / heads for the 27B models (46 and 62 layers),
        # as Gemma's query_pre_attn_scalar says.
        big = hf["num_hidden_layers"] == {"gemma2": 46, "gemma3": 62}[arch]
        hf["query_pre_attn_scalar"] = hf["hidden_size"] // hf["num_attention_heads"] if big else head_dim
    if hf["sliding_window"] is not None and pattern is not None:
        hf["layer_types"] = _layer_types(pattern, hf["num_hidden_layers"], key("attention.sliding_window_pattern"), where)
    return hf


def _rope_scaling(reader, arch: str, own: dict, n_rot: int, context: int, original: int, where: str) -> dict | None:
    """The file's RoPE scaling as Hugging Face's ``rope_scaling``, which the config rules then read as a
    config.json's: ``rope.scaling.type`` with ``.factor``; Phi-3's ``rope_factors_short`` and ``_long`` as
    ``longrope``, whose attention factor is derived as transformers derives it once the file's
    ``rope.scaling.attn_factor`` is checked to be that one (stored in float32); Llama 3.1's ``rope_freqs`` as
    ``longrope`` with that one set at every length and no attention factor, which is what llama.cpp computes
    (each inverse frequency divided by its factor) and loads as ``RopeScaling(kind="factors")``. ``n_rot``: the
    rotated features of a head; ``context``, ``original``: the context length and the pretraining one."""
    key = lambda name: f"{arch}.{name}"  # noqa: E731
    tensors = {t.name: t for t in reader.tensors if any(t.name in names for names in ROPE_FACTORS.values())}
    stray = sorted(set(tensors) - set(ROPE_FACTORS.get(arch, ())))
    if stray:
        raise CheckpointError(f"{where}: the RoPE factor tensor {stray[0]} in a {arch} file is not supported (read: "
                              f"rope_freqs.weight in llama files, rope_factors_short/long.weight in phi3 files)")
    # llama.cpp's defaults (load_hparams): type "linear", factor 1; a linear or YaRN factor of 1 scales nothing.
    kind, attention = own.get("rope.scaling.type", "linear"), own.get("rope.scaling.attn_factor", 1.0)
    if kind in ("linear", "yarn") and own.get("rope.scaling.factor", 1.0) == 1.0:
        kind = "none"
    if tensors and kind not in (("none", "longrope") if arch == "phi3" else ("none",)):
        raise CheckpointError(f"{where}: {key('rope.scaling.type')} {kind!r} with the RoPE factor tensor {min(tensors)}")
    factors = {name: _rope_factor_values(tensor, n_rot, where) for name, tensor in tensors.items()}
    if arch == "phi3" and (factors or kind == "longrope"):
        missing = [name for name in ROPE_FACTORS["phi3"] if name not in factors]
        if missing:
            raise CheckpointError(f"{where}: Phi-3's longrope RoPE without {' or '.join(missing)}")
        expected = longrope_attention_factor(context / original, original)
        if abs(attention - expected) > 1e-6 * expected:  # the file's is float32
            raise CheckpointError(f"{where}: {key('rope.scaling.attn_factor')} is {attention}, not longrope's "
                                  f"{expected:.9g} (context {context}, pretrained at {original})")
        return dict(rope_type="longrope", short_factor=factors["rope_factors_short.weight"],
                    long_factor=factors["rope_factors_long.weight"])
    if attention != 1.0:
        raise CheckpointError(f"{where}: {key('rope.scaling.attn_factor')} is {attention} (cos and sin are scaled "
                              f"for Phi-3's longrope only)")
    if factors:
        divisors = factors["rope_freqs.weight"]
        return dict(rope_type="longrope", short_factor=divisors, long_factor=divisors, attention_factor=1.0)
    if kind == "none":
        return None
    if "rope.scaling.factor" not in own:
        raise CheckpointError(f"{where}: {key('rope.scaling.type')} is {kind!r} without {key('rope.scaling.factor')}")
    return dict(rope_type=kind, factor=own["rope.scaling.factor"])


def _rope_factor_values(tensor: GGUFTensor, n_rot: int, where: str) -> list[float]:
    """A RoPE factor tensor's values, held to one positive finite factor per rotated frequency (``n_rot / 2``)."""
    if tensor.shape != (n_rot // 2,):
        raise CheckpointError(f"{where}: the tensor {tensor.name} has shape {list(tensor.shape)}, expected "
                              f"[{n_rot // 2}] (one factor per rotated frequency, half of the {n_rot} rotated features)")
    values = np.asarray(_gguf().quants.dequantize(tensor.data, tensor.tensor_type), np.float32).reshape(-1)
    if not (np.isfinite(values) & (values > 0)).all():
        raise CheckpointError(f"{where}: the tensor {tensor.name} holds factors that are not positive finite numbers")
    return [float(v) for v in values]


def _layer_types(pattern: int | list[bool], n_layers: int, name: str, where: str) -> list[str]:
    """Each layer's attention ("sliding_attention" or "full_attention") from a window pattern: a flag per layer,
    or n for a window on every layer but each n-th (llama.cpp's ``set_swa_pattern``)."""
    if isinstance(pattern, int):
        pattern = [layer % pattern < pattern - 1 for layer in range(n_layers)]
    if len(pattern) != n_layers:
        raise CheckpointError(f"{where}: {name} has {len(pattern)} entries for {n_layers} layers")
    return ["sliding_attention" if window else "full_attention" for window in pattern]


def _vocab_rows(reader) -> int:
    for tensor in reader.tensors:
        if tensor.name == "token_embd.weight":
            return int(tensor.shape[-1])
    raise CheckpointError(f"{reader.path} has no token_embd.weight")


def _gguf_architecture(model_type: str):
    """The Hugging Face architecture with its key table renamed to GGUF tensor names."""
    base = ARCHITECTURES[model_type]
    family = FAMILY_NAMES.get(model_type, {})
    names = {**{name: hf for name, hf in GGUF_NAMES.items() if hf not in family.values()}, **family}

    def renamed(table: dict) -> dict:
        return {name: table[hf] for name, hf in names.items() if hf in table}

    keys = (lambda cfg: renamed(base.keys(cfg))) if callable(base.keys) else renamed(base.keys)
    # Nothing in a GGUF file is skipped: its RoPE factor tensors are read with the metadata (``hf_config``).
    factors = "|".join(re.escape(name) for names in ROPE_FACTORS.values() for name in names)
    return dataclasses.replace(base, keys=keys, ignored=factors, prefix="")


def _unpermute(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's permutation of a q or k projection's rows ([out, ...], Hugging Face layout).

    Its converter reorders each head's rows from the two RoPE halves ``[x_0..x_(d/2-1), y_0..]`` to
    interleaved pairs ``[x_0, y_0, x_1, y_1, ...]``; this puts them back.
    """
    return w.reshape(n_heads, w.shape[0] // n_heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _per_head_qkv(w: np.ndarray, n_heads: int) -> np.ndarray:
    """GPT-NeoX's fused q, k, v rows ([3 D, ...]) from llama.cpp's order (all of q, then k, then v) back to
    Hugging Face's (q, k, v of head 0, then of head 1, ...)."""
    return w.reshape(3, n_heads, -1, *w.shape[1:]).swapaxes(0, 1).reshape(w.shape)


def _reader_fn(reader, model_type: str, n_heads: int, n_kv_heads: int):
    """name -> the tensor dequantized to float32 in Hugging Face's layout and convention: what llama.cpp's
    converter changed is undone (Llama's q and k rows permuted, GPT-NeoX's fused q, k, v reordered, Gemma's
    norm weights w stored as the gain 1 + w)."""
    tensors = {t.name: t for t in reader.tensors}
    dequantize = _gguf().quants.dequantize

    def read(name: str) -> np.ndarray:
        tensor = tensors[name]
        w = np.asarray(dequantize(tensor.data, tensor.tensor_type), dtype=np.float32)
        w = w.reshape(tuple(int(n) for n in reversed(tensor.shape)))
        if model_type == "llama":
            if re.fullmatch(r"blk\.\d+\.attn_q\.(weight|bias)", name):
                w = _unpermute(w, n_heads)
            elif re.fullmatch(r"blk\.\d+\.attn_k\.(weight|bias)", name):
                w = _unpermute(w, n_kv_heads)
        elif model_type == "gpt_neox" and re.fullmatch(r"blk\.\d+\.attn_qkv\.(weight|bias)", name):
            w = _per_head_qkv(w, n_heads)
        elif model_type in ("gemma2", "gemma3_text") and name.endswith("norm.weight"):
            w = w.astype(np.float64) - 1.0  # exact; the key table adds the 1 back (in float64, so exactly w)
        return w

    return read


def load_gguf(path: str | Path, *, dtype: str | None = None, seq_len: int | None = None):
    """A GGUF file as ``(Transformer, tokenizers.Tokenizer or None)``; see ``checkpoints.load_checkpoint``.

    Parameters are float32 by default (the dequantized values exactly); ``dtype`` converts them.
    The tokenizer is None, with a warning, when the file's tokenizer is damaged or its kind is not
    supported (``gguf_tokenizer``, ``checkpoints.tokenizer_or_warning``).
    """
    where = str(path)
    reader = open_gguf(path)
    hf = hf_config(reader, where)
    prefix = metadata(reader, "general.architecture")  # errors name the file's keys (llama.block_count), not config.json's
    names = {hf_key: f"{prefix}.{name}" for name, hf_key in {**REQUIRED_METADATA, **OPTIONAL_METADATA}.items()}
    cfg, _ = checked_config(hf, where, dtype or "float32", seq_len, names=names)
    arch = _gguf_architecture(hf["model_type"])
    headers = {t.name: (path, tuple(int(n) for n in reversed(t.shape)), t.tensor_type.name) for t in reader.tensors}
    read = _reader_fn(reader, hf["model_type"], cfg.n_heads, cfg.kv_heads)
    return build_model(cfg, arch, headers, read, where, readable=GGUF_TYPES)
