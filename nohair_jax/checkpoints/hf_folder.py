"""Hugging Face folders: ``config.json``, safetensors weights (one file, or shards listed in
``model.safetensors.index.json``) and an optional ``tokenizer.json``."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import ml_dtypes  # noqa: F401  registers bfloat16 with numpy, so safetensors' numpy reader can return it
import numpy as np

from nohair_jax.checkpoints.build import build_model, checked_config
from nohair_jax.checkpoints.families import CONFIG_FILE
from nohair_jax.metadata import CheckpointError
from nohair_jax.model import Transformer

WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
# safetensors dtype names of the float tensors we read; quantised (int, float8) checkpoints are refused.
SAFETENSORS_FLOATS = ("F64", "F32", "F16", "BF16")


def read_config(folder: str | Path) -> dict:
    """The folder's ``config.json`` as a dict; CheckpointError if the folder or the file is missing."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"checkpoint folder {str(folder)!r} does not exist")
    path = folder / CONFIG_FILE
    if not path.is_file():
        raise CheckpointError(f"checkpoint folder {str(folder)!r} has no {CONFIG_FILE}")
    return _read_json(path)


def _read_json(path: Path):
    """A JSON file's content; CheckpointError naming the file if it is not UTF-8 JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{path} is not valid JSON: {err}") from None


def weight_files(folder: Path) -> list[Path]:
    """The safetensors files of a folder: the shards its index lists, or ``model.safetensors``."""
    index = folder / INDEX_FILE
    if index.is_file():
        saved = _read_json(index)
        weight_map = saved.get("weight_map") if isinstance(saved, dict) else None
        if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
            raise CheckpointError(f"{index}: weight_map is {weight_map!r:.80}, expected an object of tensor name -> "
                                  "shard file name")
        names = sorted(set(weight_map.values()))
        missing = [n for n in names if not (folder / n).is_file()]
        if missing:
            raise CheckpointError(f"{index} lists shards that are not in the folder: {', '.join(missing)}")
        return [folder / n for n in names]
    if (folder / WEIGHTS_FILE).is_file():
        return [folder / WEIGHTS_FILE]
    other = sorted(p.name for p in folder.glob("*.bin")) + sorted(p.name for p in folder.glob("*.pt*"))
    hint = f" (found {', '.join(other)}: only safetensors weights are read)" if other else ""
    raise CheckpointError(f"checkpoint folder {str(folder)!r} has no weights: neither {WEIGHTS_FILE} nor {INDEX_FILE}{hint}")


def _safetensors():
    try:
        import safetensors
    except ImportError:
        raise ImportError("reading checkpoints needs safetensors: pip install 'nohair-jax[hf]'") from None
    return safetensors


def _open_safetensors(path: Path):
    """``safe_open`` of one file; a damaged file (truncated, not safetensors) is a one-line CheckpointError."""
    lib = _safetensors()
    try:
        return lib.safe_open(path, framework="np")
    except lib.SafetensorError as err:
        raise CheckpointError(f"{path} is damaged or not a safetensors file (truncated?): {err}") from None


def tensor_headers(files: list[Path]) -> dict[str, tuple[Path, tuple[int, ...], str]]:
    """name -> (file, shape, safetensors dtype) of every tensor, read from the headers only."""
    headers = {}
    for path in files:
        with _open_safetensors(path) as f:
            for name in f.keys():
                if name in headers:
                    raise CheckpointError(f"tensor {name} is in both {headers[name][0].name} and {path.name}")
                piece = f.get_slice(name)
                headers[name] = (path, tuple(piece.get_shape()), piece.get_dtype())
    return headers


def _safetensors_reader(headers: dict, stack: ExitStack) -> Callable[[str], np.ndarray]:
    """name -> the tensor as numpy, each file opened once (closed with ``stack``)."""
    handles = {}

    def read(name: str) -> np.ndarray:
        path = headers[name][0]
        if path not in handles:
            handles[path] = stack.enter_context(_open_safetensors(path))
        try:
            return handles[path].get_tensor(name)
        except _safetensors().SafetensorError as err:
            raise CheckpointError(f"{path}: tensor {name} cannot be read, the file is damaged: {err}") from None

    return read


def folder_tokenizer(folder: Path):
    """The folder's ``tokenizer.json`` as a ``tokenizers.Tokenizer``, or None where there is none."""
    path = folder / TOKENIZER_FILE
    if not path.is_file():
        return None
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise ImportError("reading tokenizer.json needs tokenizers: pip install 'nohair-jax[hf]'") from None
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as err:  # the tokenizers library raises its own untyped exceptions: one line naming the file
        raise CheckpointError(f"{path}: the tokenizer cannot be read: {str(err).splitlines()[0]}") from None
    settings = folder / TOKENIZER_CONFIG_FILE
    if settings.is_file():
        _add_special_tokens(tokenizer, _read_json(settings), settings)
    return tokenizer


def _add_special_tokens(tokenizer, settings, where: Path) -> None:
    """Where tokenizer_config.json says ``add_bos_token`` or ``add_eos_token``, what the tokenizer puts around a
    sequence is BOS and EOS as they say (false where unsaid), as transformers rebuilds it
    (``update_post_processor``); else tokenizer.json's own post-processor stands."""
    if not isinstance(settings, dict) or not {"add_bos_token", "add_eos_token"} & settings.keys():
        return
    from tokenizers.processors import TemplateProcessing

    around = {}  # "bos" / "eos" -> the token, where it is added
    for kind in ("bos", "eos"):
        switch, token = settings.get(f"add_{kind}_token", False), settings.get(f"{kind}_token")
        token = token.get("content") if isinstance(token, dict) else token
        if not isinstance(switch, bool):
            raise CheckpointError(f"{where}: add_{kind}_token is {switch!r:.40}, expected true or false")
        if switch and isinstance(token, str) and tokenizer.token_to_id(token) is not None:
            around[kind] = token
    bos, eos = [around[k] for k in ("bos",) if k in around], [around[k] for k in ("eos",) if k in around]
    tokenizer.post_processor = TemplateProcessing(
        single=" ".join([*bos, "$A", *eos]), pair=" ".join([*bos, "$A", *eos, *bos, "$B:1", *eos]),
        special_tokens=[(token, tokenizer.token_to_id(token)) for token in around.values()])


def load_folder(folder: Path, *, dtype: str | None = None, seq_len: int | None = None) -> Transformer:
    """The folder's model (see ``nohair_jax.checkpoints.load_checkpoint``)."""
    cfg, arch = checked_config(read_config(folder), str(folder / CONFIG_FILE), dtype, seq_len)
    headers = tensor_headers(weight_files(folder))
    with ExitStack() as stack:
        return build_model(cfg, arch, headers, _safetensors_reader(headers, stack), str(folder), SAFETENSORS_FLOATS)
