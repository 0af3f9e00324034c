"""Defaults as llama.cpp fills them: each optional GGUF metadata key the loader reads, deleted in turn.

A GGUF file in the wild may lack a key that llama.cpp's converter writes today; llama.cpp then takes a
default (``llama_model::load_hparams``) or refuses the file. For one tiny file of each architecture the
project loads, as llama.cpp's converter writes it (tests/gguf_writer.py, the models of
test_gguf_checkpoint.MODELS), and two RoPE variants (Phi-3's longrope and Llama 3.1's factor tensor, the
models of test_rope_variants.MODELS), each key of ``LLAMA_CPP`` is in turn

- deleted, and
- written at llama.cpp's default,

and the two files must read as the same model: the same ``TransformerConfig`` (``load_gguf`` run to the
config it builds the model of: metadata -> Hugging Face config -> config rules; no weights are read), or the
same refusal. A key llama.cpp requires must be refused by name; a file llama.cpp refuses (the default does not
fit the weights) must be refused; every other file must load.

The reference, ``LLAMA_CPP``, is written out here from llama.cpp's source, not from the project's tables:
llama.cpp at commit ec98e2002, as ollama vendors it (github.com/ollama/ollama, commit f63eea3d,
llama/llama.cpp/src/; ``load_hparams`` reads these keys the same way in ggerganov/llama.cpp of February 2025,
c392e509). Keys llama.cpp does not read for an architecture are not listed for it; the per-layer window
pattern, which it does not read for any of these, is listed where the project defaults it (Gemma), at the
pattern llama.cpp fixes.
"""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")

import nohair_jax as nh  # noqa: E402
from nohair_jax.checkpoints import gguf_file  # noqa: E402
from nohair_jax.config import TransformerConfig  # noqa: E402
from nohair_jax.metadata import CheckpointError  # noqa: E402
from gguf_writer import write_gguf  # noqa: E402
from test_gguf_checkpoint import MODELS, build, hf_model  # noqa: E402, F401  (hf_model: the fixture)
from test_rope_variants import _build as build_rope_variant  # noqa: E402

REQUIRED = "required"  # llama.cpp reads the key with no default: "key not found in model"


def _per_head(fields: dict, arch: str) -> int:
    return fields[f"{arch}.embedding_length"] // fields[f"{arch}.attention.head_count"]


# llama.cpp's default for a key a file lacks (the key after "<arch>."): a value, REQUIRED, or a function of the
# file's metadata (full names) and its architecture. Where from: src/llama-model.cpp, llama_model::load_hparams,
# its part common to every architecture (before ``switch (arch)``), unless a comment says otherwise.
COMMON = {
    # n_head_kv_arr = n_head_arr, then get_key_or_arr(LLM_KV_ATTENTION_HEAD_COUNT_KV, ..., false)
    "attention.head_count_kv": lambda fields, arch: fields[f"{arch}.attention.head_count"],
    # n_embd_head_k = n_embd / n_head(), then get_key(LLM_KV_ATTENTION_KEY_LENGTH, ..., false)
    "attention.key_length": _per_head,
    # n_embd_head_v = n_embd / n_head(): not the key length where the file gives that
    "attention.value_length": _per_head,
    # n_rot = n_embd_head_k (the key length, given or by default), then get_key(LLM_KV_ROPE_DIMENSION_COUNT, ..., false)
    "rope.dimension_count": lambda fields, arch: fields.get(f"{arch}.attention.key_length", _per_head(fields, arch)),
    # rope_freq_base_train = 10000.0f
    "rope.freq_base": 10000.0,
    # std::string rope_scaling("linear")
    "rope.scaling.type": "linear",
    # ropescale = 0.0f (nor rope.scale_linear) -> rope_freq_scale_train = 1.0f: a factor of 1
    "rope.scaling.factor": 1.0,
    # src/llama-hparams.h: float rope_attn_factor = 1.0f
    "rope.scaling.attn_factor": 1.0,
    # n_ctx_orig_yarn = n_ctx_train
    "rope.scaling.original_context_length": lambda fields, arch: fields[f"{arch}.context_length"],
    # get_key(LLM_KV_VOCAB_SIZE, n_vocab, false) || get_arr_n(LLM_KV_TOKENIZER_LIST, n_vocab, false); the tensors'
    # shapes take vocab.n_tokens(), the token list's length (load_tensors)
    "vocab_size": lambda fields, arch: len(fields["tokenizer.ggml.tokens"]),
}
# case LLM_ARCH_<arch>: get_key(LLM_KV_ATTENTION_LAYERNORM_RMS_EPS, hparams.f_norm_rms_eps), no default
RMS = {**COMMON, "attention.layer_norm_rms_epsilon": REQUIRED}
LLAMA_CPP = {
    "llama": RMS,
    "qwen2": RMS,
    "qwen3": RMS,
    # case LLM_ARCH_PHI3: n_swa = 0 (llama-hparams.h) where absent; a window given is switched off too ("Phi SWA is
    # currently disabled"), so 0 is llama.cpp's reading of every Phi-3 file
    "phi3": {**RMS, "attention.sliding_window": 0},
    # case LLM_ARCH_GEMMA2: n_swa = 4096, set_swa_pattern(2) (the key is not read), the soft caps of
    # llama-hparams.h: f_attn_logit_softcapping = 50.0f, f_final_logit_softcapping = 30.0f
    "gemma2": {**RMS, "attention.sliding_window": 4096, "attention.sliding_window_pattern": 2,
               "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0},
    # case LLM_ARCH_GEMMA3: no window unless the file gives one over 0 (then set_swa_pattern(6); the key is not
    # read); f_final_logit_softcapping = 0.0f, which the graph (models/gemma3.cpp) reads as no cap
    "gemma3": {**RMS, "attention.sliding_window": 0, "attention.sliding_window_pattern": 6,
               "final_logit_softcapping": 0.0},
    # case LLM_ARCH_OLMO2: no window unless the file gives one over 0
    "olmo2": {**RMS, "attention.sliding_window": 0},
    # case LLM_ARCH_GPTNEOX: get_key(LLM_KV_ATTENTION_LAYERNORM_EPS, ...), get_key(LLM_KV_USE_PARALLEL_RESIDUAL, ...)
    "gptneox": {**COMMON, "attention.layer_norm_epsilon": REQUIRED, "use_parallel_residual": REQUIRED},
}

# The files: name -> (the model's builder and name, llama.cpp's architecture).
CASES = {
    **{MODELS[name][2]: (build, name, MODELS[name][2])
       for name in ("llama_gqa", "qwen2", "qwen3", "phi3", "gemma2", "gemma3", "olmo2", "gptneox")},
    "phi3_longrope": (build_rope_variant, "phi3_longrope", "phi3"),
    "llama3": (build_rope_variant, "llama3", "llama"),
}
assert {arch for _, _, arch in CASES.values()} == set(LLAMA_CPP)

# Files llama.cpp refuses although the key has a default, because the default does not fit the weights
# (load_tensors: "tensor ... has wrong shape"): Qwen3's heads of 128 features in a 64-wide model against heads of
# 64 / 4 = 16; Phi-3's RoPE factors for 8 rotated features of 16 against one per frequency of all 16 ({n_rot/2}).
# (case, key) -> what the project's refusal names.
REFUSED_BY_LLAMA_CPP = {
    ("qwen3", "attention.key_length"): "qwen3.attention.key_length",
    ("qwen3", "attention.value_length"): "qwen3.attention.value_length",
    ("phi3_longrope", "rope.dimension_count"): "rope_factors_long.weight has shape [4], expected [8]",
}
# Files llama.cpp loads and the project refuses, by choice: it holds rope.scaling.attn_factor to longrope's formula
# of the context and the pretraining context (gguf_file._rope_scaling), where llama.cpp scales cos and sin by
# whatever the file says. Without the key (1.0), or with the pretraining context taken as the context (the
# formula then gives 1), the file's value is not the formula's.
REFUSED_BY_CHOICE = {
    ("phi3_longrope", "rope.scaling.attn_factor"): "phi3.rope.scaling.attn_factor",
    ("phi3_longrope", "rope.scaling.original_context_length"): "phi3.rope.scaling.attn_factor",
}


def read(path) -> TransformerConfig | str:
    """The config ``load_gguf`` builds the file's model of (the weights are not read: 0.3 ms a file, against
    80 ms for the model), or its refusal's message, the path written <file> so that two files' compare."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gguf_file, "build_model", lambda cfg, *args, **kwargs: cfg)
        try:
            return gguf_file.load_gguf(path)
        except CheckpointError as err:
            return str(err).replace(str(path), "<file>")


@pytest.fixture(scope="module")
def written(hf_model, tmp_path_factory):
    """case -> (model, its file as the converter writes it, the file's metadata as gguf's reader reads it)."""
    cache = {}

    def get(case: str):
        if case not in cache:
            builder, name, arch = CASES[case]
            model = hf_model(name) if builder is build else builder(name)
            path = write_gguf(tmp_path_factory.mktemp(case) / "full.gguf", model, arch)
            fields = {key: field.contents() for key, field in gguf.GGUFReader(path).fields.items()}
            cache[case] = model, path, fields
        return cache[case]

    return get


@pytest.mark.parametrize("case", CASES)
def test_the_config_step_is_what_load_checkpoint_builds(written, case):
    """``read`` stops short of the weights only: the model loaded has the config it returns."""
    _, path, _ = written(case)
    assert read(path) == nh.load_checkpoint(path)[0].config


@pytest.mark.parametrize("case, key", [(case, key) for case, (_, _, arch) in CASES.items() for key in LLAMA_CPP[arch]])
def test_a_missing_key_reads_as_llama_cpps_default(written, tmp_path, case, key):
    model, full, fields = written(case)
    arch = CASES[case][2]
    name, default = f"{arch}.{key}", LLAMA_CPP[arch][key]
    without = read(write_gguf(tmp_path / "without.gguf", model, arch, skip_metadata=(key,)) if name in fields else full)
    if default is REQUIRED:
        assert without == f"<file> lacks metadata the model needs: {name}"
        return
    value = default(fields, arch) if callable(default) else default
    explicit = read(write_gguf(tmp_path / "explicit.gguf", model, arch, skip_metadata=(key,), metadata={name: value}))
    assert without == explicit, f"{name} missing and written as llama.cpp's default {value!r} read differently"
    named = REFUSED_BY_LLAMA_CPP.get((case, key)) or REFUSED_BY_CHOICE.get((case, key))
    if named:
        assert isinstance(without, str) and named in without, without
    else:
        assert isinstance(without, TransformerConfig), without
    if name in fields and fields[name] == value:  # the file said what llama.cpp assumes: nothing changed
        assert without == read(full)


def test_the_defaults_change_the_model_where_the_files_differ(written):
    """The check has teeth: where a test file's value is not llama.cpp's default, deleting it changes the
    config."""
    differ = [("gemma2", "attn_logit_softcapping"), ("gemma2", "final_logit_softcapping"),
              ("gemma2", "attention.sliding_window"), ("llama", "rope.freq_base"), ("gemma3", "rope.scaling.factor"),
              ("gptneox", "rope.dimension_count"), ("phi3", "rope.dimension_count"), ("llama", "attention.head_count_kv")]
    for case, key in differ:
        model, full, _ = written(case)
        without = write_gguf(full.with_name(f"without_{key}.gguf"), model, CASES[case][2], skip_metadata=(key,))
        config = read(without)
        assert isinstance(config, TransformerConfig) and config != read(full), (case, key)
