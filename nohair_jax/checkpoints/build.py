"""What both formats share: a family's config checked, and a checkpoint's tensors matched to the
model's skeleton (every problem found from the headers first) and read into a ``Transformer``."""

from __future__ import annotations

import re
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from nohair_jax.checkpoints.families import Architecture, _expand, architecture
from nohair_jax.checks import check_int, physical_memory
from nohair_jax.config import TransformerConfig
from nohair_jax.metadata import CheckpointError, check_config, check_values
from nohair_jax.model import Transformer, model_skeleton

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


def _dtype(hf: dict, dtype: str | None, where: str) -> str:
    """The parameter dtype: the one asked for, else the config's (``dtype`` or ``torch_dtype``), else float32.

    float64 is refused without 64-bit JAX: JAX would make every array float32 while the model's config says
    float64. It is not turned on here: x64 is global, and arrays made under it would meet float32 ones later.
    """
    chosen = dtype or hf.get("dtype") or hf.get("torch_dtype") or "float32"
    if chosen not in FLOAT_DTYPES:
        raise CheckpointError(f"dtype {chosen!r} is not one of {FLOAT_DTYPES}")
    if chosen == "float64" and not jax.config.jax_enable_x64:
        if dtype:
            raise CheckpointError("dtype float64 needs 64-bit JAX: run under jax.enable_x64(True) or set JAX_ENABLE_X64=1")
        raise CheckpointError(f"{where}: its dtype float64 needs 64-bit JAX: run under jax.enable_x64(True), set "
                              "JAX_ENABLE_X64=1, or pass dtype='float32'")
    return chosen


# The config keys that fix a model's size: layers, width, MLP width, vocabulary (GPT-2's names, then every other
# family's).
SIZE_KEYS = {"gpt2": ("n_layer", "n_embd", "n_inner", "vocab_size")}
DEFAULT_SIZE_KEYS = ("num_hidden_layers", "hidden_size", "intermediate_size", "vocab_size")


def _check_size(hf: dict, dtype: str, where: str, names: dict[str, str]) -> None:
    """CheckpointError naming the config's sizes where its parameters cannot fit in this machine's memory.

    Checked before anything is built from the config: a config of 10^9 layers would otherwise have its family's
    per-layer lists and the model's skeleton built (``model.model_skeleton``: ``nnx.eval_shape``, whose time
    grows with the square of the layer count) until the machine gives out. The count is a lower bound (each
    layer's two MLP projections and the embedding), so that no model that fits is refused.
    """
    keys = SIZE_KEYS.get(hf["model_type"], DEFAULT_SIZE_KEYS)
    values = [hf.get(key) for key in keys]
    layers, width, mlp, vocab = (value or 0 for value in values)
    count = layers * 2 * width * (mlp or 4 * width) + vocab * width  # GPT-2's n_inner: null for 4 x n_embd
    need, have = count * jnp.dtype(dtype).itemsize, physical_memory()
    if need > have:
        sizes = ", ".join(f"{names.get(key, key)} {value}" for key, value in zip(keys, values))
        raise CheckpointError(f"{where}: the config asks for at least {count:,} parameters ({need / 2**30:,.1f} GiB in "
                              f"{dtype}: {sizes}), more than this machine's {have / 2**30:.1f} GiB of memory")


def checked_config(
    hf: dict, where: str, dtype: str | None, seq_len: int | None, *, names: dict[str, str] | None = None,
) -> tuple[TransformerConfig, Architecture]:
    """The model's config and architecture from a Hugging Face config dict; ``seq_len`` checked.

    ``where`` names the source in errors (a folder's config.json, a GGUF file), ``names`` its keys where the
    source calls them otherwise (a GGUF file's metadata); every key read is first held to
    ``metadata.CONFIG_SCHEMA`` and the family's own ``Architecture.schema``, then what the config does not say
    is the family's default
    (``Architecture.defaults``: transformers' own); a model too big for this machine is refused before
    anything is built from it (``_check_size``).
    """
    if seq_len is not None:
        check_int("seq_len", seq_len)
    arch = architecture(check_config(hf, where))
    check_values(hf, arch.schema, where, names)
    hf = arch.filled(hf)
    chosen = _dtype(hf, dtype, where)
    _check_size(hf, chosen, where, names or {})
    limit, why = arch.limit(hf)
    if seq_len is not None and seq_len > limit:
        raise CheckpointError(f"{seq_len} tokens asked, but {where} computes at most {limit}: {why}")
    try:
        return arch.config(hf, chosen, limit), arch
    except CheckpointError:
        raise
    except ValueError as err:  # TransformerConfig's and RopeScaling's own checks
        raise CheckpointError(f"{where}: {err}") from None


def build_model(
    cfg: TransformerConfig, arch: Architecture, headers: dict, read: Callable[[str], np.ndarray], where: str,
    readable: tuple[str, ...],
) -> Transformer:
    """The ``Transformer`` of ``cfg`` with the checkpoint's tensors, every problem found first.

    The model's skeleton is built without allocating weights (``model.model_skeleton``); the tensors
    (``headers``: name -> (file, shape, dtype)) are matched against it, and only when every one fits
    is each read once with ``read(name) -> numpy`` (in the checkpoint's layout), converted on the host
    to the model's dtype and put on the device.
    """
    graphdef, state = model_skeleton(cfg)
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
            arrays[target] = jax.device_put(value)  # not jnp.asarray: that compiles a conversion per shape (2.4 s for Gemma 3)
    state = nnx.from_flat_state([(path, var.replace(arrays[_dotted(path)])) for path, var in flat])
    return nnx.merge(graphdef, state)
