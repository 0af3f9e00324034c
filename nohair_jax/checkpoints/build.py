"""What both formats share: a family's config checked, and a checkpoint's tensors matched to the
model's skeleton (every problem found from the headers first) and read into a ``Transformer``."""

from __future__ import annotations

import re
from collections.abc import Callable

import jax.numpy as jnp
import numpy as np
from flax import nnx

from nohair_jax.checkpoints.families import Architecture, _expand, architecture
from nohair_jax.config import TransformerConfig
from nohair_jax.metadata import CheckpointError, check_config
from nohair_jax.model import Transformer

FLOAT_DTYPES = ("float32", "bfloat16", "float16", "float64")


def _dotted(path: tuple) -> str:
    return ".".join(str(p) for p in path)


def _converted_shape(convert: Callable, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape ``convert`` gives a tensor of ``shape``, from a zero-stride stand-in (no memory)."""
    return convert(np.broadcast_to(np.zeros((), np.int8), shape)).shape


def _plan(
    arch: Architecture, cfg: TransformerConfig, headers: dict, shapes: dict[str, tuple], readable: tuple[str, ...],
) -> tuple[dict, list[str]]:
    """Match the checkpoint's tensors to the model's state.

    Args:
      headers: checkpoint name -> (file, shape, dtype), from ``tensor_headers`` (or the GGUF reader).
      shapes: model state path (dotted) -> shape.
      readable: the tensor dtypes this format can read (the others are listed as problems).

    Returns:
      (plan, problems): plan maps each checkpoint name to read onto [(state path, convert)];
      problems lists every missing or unexpected tensor, shape mismatch and unreadable tensor.
    """
    # A table entry is expected when the model has all its targets: biases, lm_head, pos_embed exist
    # in the skeleton exactly when the config says so.
    keys = arch.keys(cfg) if callable(arch.keys) else arch.keys
    table = {k: v for k, v in _expand(keys, cfg.n_layers).items() if all(p in shapes for p, _ in v)}
    stripped = {name.removeprefix(arch.prefix): name for name in headers}
    # Name missing tensors as this checkpoint would (the output projection is never prefixed).
    prefix = arch.prefix if any(n.startswith(arch.prefix) for n in headers) else ""
    missing = [("" if k.startswith(("lm_head.", "embed_out.")) else prefix) + k for k in table if k not in stripped]
    unexpected = [n for k, n in stripped.items() if k not in table and not re.fullmatch(arch.ignored, k)]
    covered = {p for targets in table.values() for p, _ in targets}
    missing += [f"(a tensor for the model's {p})" for p in shapes if p not in covered]
    mismatched, unreadable, plan = [], [], {}
    for key, targets in table.items():
        if key not in stripped:
            continue
        name = stripped[key]
        _, shape, dtype = headers[name]
        if dtype not in readable:
            unreadable.append(f"{name} ({dtype})")
        for path, convert in targets:
            got = _converted_shape(convert, shape)
            if got != tuple(shapes[path]):
                mismatched.append(f"{name} {list(shape)} gives {path} {list(got)}, expected {list(shapes[path])}")
        plan[name] = targets

    problems = [
        f"{label} ({len(items)}): {', '.join(items)}"
        for label, items in (
            ("missing tensors", missing),
            ("unexpected tensors", unexpected),
            ("shape mismatches", mismatched),
            (f"tensors of a type that is not read (readable: {', '.join(readable)})", unreadable),
        )
        if items
    ]
    return plan, problems


def _dtype(hf: dict, dtype: str | None) -> str:
    """The parameter dtype: the one asked for, else the config's (``dtype`` or ``torch_dtype``), else float32."""
    chosen = dtype or hf.get("dtype") or hf.get("torch_dtype") or "float32"
    if chosen not in FLOAT_DTYPES:
        raise CheckpointError(f"dtype {chosen!r} is not one of {FLOAT_DTYPES}")
    return chosen


def checked_config(hf: dict, where: str, dtype: str | None, seq_len: int | None) -> tuple[TransformerConfig, Architecture]:
    """The model's config and architecture from a Hugging Face config dict; ``seq_len`` checked.

    ``where`` names the source in errors (a folder's config.json, a GGUF file); every key read is first
    held to ``metadata.CONFIG_SCHEMA``, then what the config does not say is the family's default
    (``Architecture.defaults``: transformers' own).
    """
    arch = architecture(check_config(hf, where))
    hf = arch.filled(hf)
    limit, why = arch.limit(hf)
    if seq_len is not None and seq_len > limit:
        raise CheckpointError(f"{seq_len} tokens asked, but {where} computes at most {limit}: {why}")
    try:
        return arch.config(hf, _dtype(hf, dtype), limit), arch
    except CheckpointError:
        raise
    except ValueError as err:  # TransformerConfig's and RopeScaling's own checks
        raise CheckpointError(f"{where}: {err}") from None


def build_model(
    cfg: TransformerConfig, arch: Architecture, headers: dict, read: Callable[[str], np.ndarray], where: str,
    readable: tuple[str, ...],
) -> Transformer:
    """The ``Transformer`` of ``cfg`` with the checkpoint's tensors, every problem found first.

    The model's skeleton is built without allocating weights (``nnx.eval_shape``); the tensors
    (``headers``: name -> (file, shape, dtype)) are matched against it, and only when every one fits
    is each read once with ``read(name) -> numpy`` (in the checkpoint's layout), converted on the host
    to the model's dtype and put on the device.
    """
    abstract = nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0)))
    graphdef, state = nnx.split(abstract)
    flat = nnx.to_flat_state(state)
    shapes = {_dotted(path): var.get_value().shape for path, var in flat}
    plan, problems = _plan(arch, cfg, headers, shapes, readable)
    if problems:
        summary = f"{cfg.n_layers} layers, d_model {cfg.d_model}, vocabulary {cfg.vocab_size}"
        raise CheckpointError(f"the weights in {where} do not fit its config ({summary}):\n  " + "\n  ".join(problems))
    dtype, arrays = jnp.dtype(cfg.dtype), {}
    for name, targets in plan.items():
        tensor = read(name)
        for target, convert in targets:
            value = convert(tensor).astype(dtype, copy=False)
            bad = ~np.isfinite(value)
            if bad.any():  # a NaN or inf weight would make every offset NaN, silently
                first = tuple(int(i) for i in np.argwhere(bad)[0])
                raise CheckpointError(f"{where}: tensor {name} holds {int(bad.sum())} non-finite values "
                                      f"(the first, {value[first]}, at index {first})")
            arrays[target] = jnp.asarray(value)
    state = nnx.from_flat_state([(path, var.replace(arrays[_dotted(path)])) for path, var in flat])
    return nnx.merge(graphdef, state)
