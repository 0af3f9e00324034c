"""Checkpoint import (``nohair_jax.checkpoints``) against the reference, Hugging Face transformers.

Tiny random models of each supported family are built with transformers, every parameter
(biases and norm scales included, which transformers initialises to constants) is perturbed so
that a wrong mapping shows, saved with ``save_pretrained`` and loaded back with the project. Every
layer's hidden state and the logits are compared with transformers' own forward pass in float32.
Relative error here is ``max |ours - theirs| / max |theirs|`` over one layer (or the logits).
"""

from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from flax import nnx  # noqa: E402
from safetensors.numpy import load_file, save_file  # noqa: E402

import nohair_jax as nh  # noqa: E402
from nohair_jax.checkpoints import load_tokenizer  # noqa: E402
from nohair_jax.tokenization import tokenize, tokenized_prompt_pairs  # noqa: E402
from nohair_jax.cli import main  # noqa: E402
from nohair_jax.model import RopeScaling, rope_tables  # noqa: E402
from families import FAMILIES  # noqa: E402
from torch_float64 import float32_is_float64  # noqa: E402

TOLERANCE = 1e-4
LLAMA_SIZES = dict(vocab_size=101, hidden_size=24, intermediate_size=40, num_hidden_layers=3, num_attention_heads=3)
# Kept below 64 / 4 = 16, divided above 64 / 1, interpolated between: with head_dim 8 and theta 500
# the wavelengths are 6, 30, 140 and 661, so all three branches act.
LLAMA3_ROPE = dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                   original_max_position_embeddings=64)
NEOX_SIZES = dict(vocab_size=101, hidden_size=24, intermediate_size=40, num_hidden_layers=3, num_attention_heads=3,
                  max_position_embeddings=64)
GPT2_SIZES = dict(vocab_size=300, n_embd=24, n_layer=3, n_head=3, n_positions=64, bos_token_id=0, eos_token_id=0)

# name -> (model class, config): 3 layers, 3 heads of dimension 8, odd vocabularies. (transformers'
# configs edit the rope dicts they are given: each gets its own copy.)
MODELS = {
    "gpt2": ("GPT2LMHeadModel", transformers.GPT2Config(**GPT2_SIZES)),
    "gpt2_untied": ("GPT2LMHeadModel", transformers.GPT2Config(**GPT2_SIZES, tie_word_embeddings=False)),
    "llama_gqa": ("LlamaForCausalLM", transformers.LlamaConfig(**LLAMA_SIZES, num_key_value_heads=1)),
    "llama3_rope_tied": ("LlamaForCausalLM", transformers.LlamaConfig(
        **LLAMA_SIZES, num_key_value_heads=3, tie_word_embeddings=True, rope_scaling=dict(LLAMA3_ROPE), rope_theta=500.0)),
    "llama_linear_bias": ("LlamaForCausalLM", transformers.LlamaConfig(
        **LLAMA_SIZES, num_key_value_heads=1, attention_bias=True, mlp_bias=True,
        rope_scaling=dict(rope_type="linear", factor=4.0))),
    "qwen2": ("Qwen2ForCausalLM", transformers.Qwen2Config(**LLAMA_SIZES, num_key_value_heads=1, tie_word_embeddings=True)),
    # Qwen2's window on some layers: from max_window_layers = 1 on (layers 2 and 3), 16 tokens under 40.
    "qwen2_window": ("Qwen2ForCausalLM", transformers.Qwen2Config(**LLAMA_SIZES, num_key_value_heads=1,
                                                                  use_sliding_window=True, sliding_window=16,
                                                                  max_window_layers=1)),
    "mistral": ("MistralForCausalLM", transformers.MistralConfig(**LLAMA_SIZES, num_key_value_heads=1, sliding_window=None)),
    # A window of 16 under the 40-token test sequences: transformers' own sliding-window mask.
    "mistral_window": ("MistralForCausalLM", transformers.MistralConfig(**LLAMA_SIZES, num_key_value_heads=1,
                                                                        sliding_window=16)),
    # Qwen3: heads of 10 features (not hidden_size / heads = 8) and an RMSNorm on every head's q and k.
    "qwen3": ("Qwen3ForCausalLM", transformers.Qwen3Config(**LLAMA_SIZES, num_key_value_heads=1, head_dim=10,
                                                           tie_word_embeddings=True)),
    # Pythia: the parallel block, RoPE on half of each head's 8 features, LayerNorm biases, an untied output.
    "pythia": ("GPTNeoXForCausalLM", transformers.GPTNeoXConfig(**NEOX_SIZES, rotary_pct=0.5)),
    "neox_sequential": ("GPTNeoXForCausalLM", transformers.GPTNeoXConfig(**NEOX_SIZES, rotary_pct=1.0,
                                                                         use_parallel_residual=False)),
    # OLMo 2: norms on the sublayers' outputs only, QK-norm over the whole projection, grouped heads.
    "olmo2": ("Olmo2ForCausalLM", transformers.Olmo2Config(**LLAMA_SIZES, num_key_value_heads=1, pad_token_id=0,
                                                         eos_token_id=1)),
    # Phi-3: q, k, v and gate, up fused; RoPE on half of each head.
    "phi3": ("Phi3ForCausalLM", transformers.Phi3Config(**LLAMA_SIZES, num_key_value_heads=1, pad_token_id=0,
                                                       eos_token_id=1, partial_rotary_factor=0.5)),
    # Gemma 2: soft caps low enough to bite, heads of 10 features, a window of 16 on layers 1 and 3 under
    # the 40-token sequences, query_pre_attn_scalar not head_dim.
    "gemma2": ("Gemma2ForCausalLM", transformers.Gemma2Config(
        **LLAMA_SIZES, num_key_value_heads=1, head_dim=10, query_pre_attn_scalar=7, attn_logit_softcapping=2.0,
        final_logit_softcapping=3.0, sliding_window=16, max_position_embeddings=64)),
    # Gemma 3: window layers with their own RoPE base, the global one scaled linearly, QK-norm.
    "gemma3": ("Gemma3ForCausalLM", transformers.Gemma3TextConfig(
        **LLAMA_SIZES, num_key_value_heads=1, head_dim=10, query_pre_attn_scalar=7, sliding_window=16,
        sliding_window_pattern=2, max_position_embeddings=64,
        rope_parameters=dict(full_attention=dict(rope_type="linear", factor=4.0, rope_theta=1000.0),
                             sliding_attention=dict(rope_type="default", rope_theta=50.0)))),
}

# The model that stands for each family where a test runs one per family (test_config_defaults). A family with
# none here is its row of tests/families.py, added to MODELS under its own name: every test above runs on it.
REPRESENTATIVE = {"gpt2": "gpt2", "llama": "llama_gqa", "mistral": "mistral_window", "qwen2": "qwen2_window",
                  "qwen3": "qwen3", "gpt_neox": "pythia", "olmo2": "olmo2", "phi3": "phi3", "gemma2": "gemma2",
                  "gemma3_text": "gemma3"}
MODELS.update({family: (row.model_class, row.hf_config()) for family, row in FAMILIES.items()
               if family not in REPRESENTATIVE})


def _build(name: str):
    cls, config = MODELS[name]
    torch.manual_seed(0)
    model = getattr(transformers, cls)(config)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model.eval()


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """name -> (transformers model, folder it was saved to), built once per module."""
    cache = {}

    def get(name):
        if name not in cache:
            model = _build(name)
            folder = tmp_path_factory.mktemp(name)
            model.save_pretrained(folder)
            cache[name] = (model, folder)
        return cache[name]

    return get


def _last_block(model):
    return getattr(model, "transformer", None) and model.transformer.h[-1] or (
        model.gpt_neox.layers[-1] if hasattr(model, "gpt_neox") else model.model.layers[-1])


def _reference(model, tokens: np.ndarray):
    """transformers' forward pass: (hidden [L+1, B, T, D] with hidden[L] before the final norm,
    hidden[L] after it, logits), as numpy. Its own ``hidden_states[L]`` has the final norm
    applied, so the last block's output is caught with a hook."""
    caught = {}
    hook = _last_block(model).register_forward_hook(lambda m, i, o: caught.setdefault("h", o[0] if isinstance(o, tuple) else o))
    with torch.no_grad():
        out = model(torch.as_tensor(tokens), output_hidden_states=True)
    hook.remove()
    hidden = [h.numpy() for h in out.hidden_states[:-1]] + [caught["h"].numpy()]
    return np.stack(hidden), out.hidden_states[-1].numpy(), out.logits.numpy()


def _rel(ours, theirs) -> float:
    return float(np.max(np.abs(np.asarray(ours, np.float64) - theirs)) / np.max(np.abs(theirs)))


def _errors(model, reference, tokens) -> dict[str, float]:
    """Relative error of every hidden state, the final-normed last state and the logits against ``_reference``'s."""
    hidden, normed, logits = reference
    out = model(jnp.asarray(tokens, jnp.int32))
    errors = {f"hidden[{l}]": _rel(out.hidden[l], hidden[l]) for l in range(hidden.shape[0])}
    errors["final norm"] = _rel(model.final_norm(out.hidden[-1])[0], normed)
    errors["logits"] = _rel(out.logits, logits)
    return errors


@pytest.mark.parametrize("name", list(MODELS))
def test_hidden_states_and_logits_match_transformers(saved, name):
    hf, folder = saved(name)
    model, tokenizer = nh.load_checkpoint(folder)
    assert tokenizer is None and model.config.dtype == "float32"
    tokens = np.random.default_rng(0).integers(0, hf.config.vocab_size, (2, 40))
    errors = _errors(model, _reference(hf, tokens), tokens)
    print(name, "max relative error", f"{max(errors.values()):.2e}")
    assert max(errors.values()) < TOLERANCE, errors


# One model per family and feature in float64 (the float32 test runs every one): the untied, plain and
# sequential variants of a family add no mapping of their own.
FLOAT64_MODELS = [name for name in MODELS if name not in ("gpt2_untied", "mistral", "qwen2", "neox_sequential")]


@pytest.mark.parametrize("name", FLOAT64_MODELS)
def test_float64_parity_with_transformers(name, tmp_path):
    """Every family in float64 on both sides (``float32_is_float64``): every layer, the final norm and the
    logits within 1e-10 relative (float64 rounding is ~1e-16; the float32 test above cannot see a
    mapping error below its 1e-4)."""
    with float32_is_float64():
        hf = _build(name)
        hf.save_pretrained(tmp_path)
        tokens = np.random.default_rng(0).integers(0, hf.config.vocab_size, (2, 40))
        reference = _reference(hf, tokens)
    with jax.enable_x64(True):
        model, _ = nh.load_checkpoint(tmp_path, dtype="float64")
        errors = _errors(model, reference, tokens)
    assert model.config.dtype == "float64" and reference[0].dtype == np.float64
    print(name, "float64 max relative error", f"{max(errors.values()):.2e}")
    assert max(errors.values()) < 1e-10, errors


def test_config_mapping(saved):
    assert nh.load_checkpoint(saved("llama3_rope_tied")[1])[0].config.rope_scaling == RopeScaling("llama3", 8.0, 1.0, 4.0, 64)
    cfg = nh.load_checkpoint(saved("qwen2")[1])[0].config
    assert (cfg.bias, cfg.qkv_bias, cfg.kv_heads, cfg.tied_embeddings) == (False, True, 1, True)
    cfg = nh.load_checkpoint(saved("gpt2")[1])[0].config
    assert (cfg.mlp, cfg.position, cfg.max_len, cfg.norm_eps) == ("gelu_tanh", "learned", 64, 1e-5)


@pytest.mark.parametrize("rope", [LLAMA3_ROPE, dict(rope_type="linear", factor=4.0)])
def test_rope_scaling_frequencies_match_transformers(rope):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = transformers.LlamaConfig(**LLAMA_SIZES, head_dim=32, rope_scaling=dict(rope))  # it edits the dict
    theirs, _ = ROPE_INIT_FUNCTIONS[rope["rope_type"]](config, "cpu")
    scaling = RopeScaling(rope["rope_type"], rope["factor"], **(
        dict(low_freq_factor=1.0, high_freq_factor=4.0, original_max_len=64) if rope["rope_type"] == "llama3" else {}))
    cos, sin = rope_tables(2, 32, 10000.0, jnp.float32, scaling)
    np.testing.assert_allclose(np.arctan2(sin[1, :16], cos[1, :16]), theirs.numpy(), rtol=1e-6)


def test_rope_scaling_config_round_trips_and_is_checked():
    cfg = nh.TransformerConfig(position="rope", rope_scaling=RopeScaling("llama3", 8.0, original_max_len=64))
    assert nh.TransformerConfig(**json.loads(json.dumps(cfg.to_dict()))) == cfg
    with pytest.raises(ValueError, match="'yarn' is not one of"):
        RopeScaling("yarn", 2.0)
    with pytest.raises(ValueError, match="high_freq_factor > low_freq_factor"):
        RopeScaling("llama3", 8.0, low_freq_factor=4.0, high_freq_factor=1.0)


def test_older_config_layout(saved, tmp_path):
    """transformers < 5 wrote rope_theta and rope_scaling ("type") at the top level, and torch_dtype."""
    folder = tmp_path / "old"
    shutil.copytree(saved("llama_gqa")[1], folder)
    config = json.loads((folder / "config.json").read_text())
    del config["rope_parameters"], config["dtype"]
    config.update(rope_theta=5e5, rope_scaling={"type": "linear", "factor": 2.0}, torch_dtype="bfloat16")
    (folder / "config.json").write_text(json.dumps(config))
    cfg = nh.load_checkpoint(folder)[0].config
    assert (cfg.rope_theta, cfg.rope_scaling, cfg.dtype) == (5e5, RopeScaling("linear", 2.0), "bfloat16")


def test_offsets_equal_offsets_from_transformers_hidden_states(saved):
    hf, folder = saved("llama_gqa")
    model, _ = nh.load_checkpoint(folder)
    a, b, c = nh.random_prompt_pairs(3, 3, 5, 20, hf.config.vocab_size)
    off = nh.prompt_pair_offsets(model, a, b, c)
    ha, _, la = _reference(hf, np.concatenate([a, c], 1))
    hb, _, lb = _reference(hf, np.concatenate([b, c], 1))
    l2 = np.linalg.norm(ha[:, :, 5:] - hb[:, :, 5:], axis=-1).transpose(1, 0, 2)  # [n, L+1, T]
    assert off.l2[:, 0].max() == 0
    for layer in range(1, l2.shape[1]):
        assert _rel(off.l2[:, layer], l2[:, layer]) < TOLERANCE
    logp_a = torch.log_softmax(torch.as_tensor(la[:, 5:], dtype=torch.float64), -1)
    logp_b = torch.log_softmax(torch.as_tensor(lb[:, 5:], dtype=torch.float64), -1)
    kl = (logp_a.exp() * (logp_a - logp_b)).sum(-1).numpy()
    np.testing.assert_allclose(off.kl, kl, rtol=1e-3, atol=1e-6)


def _params(folder):
    return nnx.to_pure_dict(nnx.state(nh.load_checkpoint(folder)[0]))


def test_base_model_without_prefix_loads_the_same_weights(saved, tmp_path):
    hf, folder = saved("gpt2")
    hf.transformer.save_pretrained(tmp_path)  # a GPT2Model: names without "transformer."
    jax.tree.map(np.testing.assert_array_equal, _params(folder), _params(tmp_path))


def test_sharded_checkpoint_loads_the_same_model(saved, tmp_path):
    hf, folder = saved("gpt2")
    hf.save_pretrained(tmp_path, max_shard_size="20KB")
    shards = set(json.loads((tmp_path / "model.safetensors.index.json").read_text())["weight_map"].values())
    assert len(shards) > 2 and not (tmp_path / "model.safetensors").exists()
    jax.tree.map(np.testing.assert_array_equal, _params(folder), _params(tmp_path))


def test_bfloat16_checkpoint_keeps_its_dtype_or_converts_on_request(tmp_path):
    bf16 = _build("llama_gqa").to(torch.bfloat16)
    bf16.save_pretrained(tmp_path)
    weight = bf16.model.layers[0].self_attn.q_proj.weight.detach().float().numpy().T
    model, _ = nh.load_checkpoint(tmp_path)
    assert model.config.dtype == "bfloat16" and model.blocks[0].attn.q.kernel[...].dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(model.blocks[0].attn.q.kernel[...], np.float32), weight)
    model32, _ = nh.load_checkpoint(tmp_path, dtype="float32")
    assert model32.blocks[0].attn.q.kernel[...].dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(model32.blocks[0].attn.q.kernel[...]), weight)


def _with_tokenizer(folder, tmp_path):
    """A copy of a checkpoint folder with a word-level tokenizer.json built here (no download)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = "[UNK] the a cat dog sat on mat and ran away".split()
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    target = tmp_path / "with_tokenizer"
    shutil.copytree(folder, target)
    tokenizer.save(str(target / "tokenizer.json"))
    return target, tokenizer


def test_tokenizer_json_round_trip(saved, tmp_path):
    folder, built = _with_tokenizer(saved("gpt2")[1], tmp_path)
    _, tokenizer = nh.load_checkpoint(folder)
    text = "the cat sat on the mat and a dog ran"
    assert tokenizer.encode(text).ids == built.encode(text).ids == [1, 3, 5, 6, 1, 7, 8, 2, 4, 9]
    assert load_tokenizer(saved("gpt2")[1]) is None
    np.testing.assert_array_equal(tokenize(None, "ab\u00e9"), [97, 98, 195, 169])  # no tokenizer: UTF-8 bytes


# ---------------------------------------------------------------------------------------------
# Errors: one CheckpointError naming the problem.


def _error(folder, **kwargs) -> str:
    with pytest.raises(nh.CheckpointError) as err:
        nh.load_checkpoint(folder, **kwargs)
    return str(err.value)


def test_missing_folder_config_or_weights(tmp_path):
    assert "does not exist" in _error(tmp_path / "nowhere")
    assert "has no config.json" in _error(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(MODELS["gpt2"][1].to_dict()))
    (tmp_path / "pytorch_model.bin").write_bytes(b"")
    message = _error(tmp_path)
    assert "has no weights" in message and "pytorch_model.bin" in message


def test_unsupported_architecture_lists_the_supported_ones(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mamba", "architectures": ["MambaForCausalLM"]}))
    message = _error(tmp_path)
    assert "'mamba' (MambaForCausalLM) is not supported" in message
    assert "gemma2, gemma3_text, gpt2, gpt_neox, llama, mistral, olmo2, phi3, qwen2, qwen3" in message


def test_unsupported_settings_are_named(saved, tmp_path):
    folder = tmp_path / "yarn"
    shutil.copytree(saved("llama_gqa")[1], folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(rope_parameters=dict(rope_type="yarn", factor=4.0, rope_theta=1e4), hidden_act="gelu")
    (folder / "config.json").write_text(json.dumps(config))
    message = _error(folder)
    assert "rope type 'yarn'" in message and "hidden_act='gelu'" in message


def test_every_tensor_problem_in_one_error(saved, tmp_path):
    folder = tmp_path / "broken"
    shutil.copytree(saved("gpt2")[1], folder)
    tensors = load_file(folder / "model.safetensors")
    del tensors["transformer.h.1.ln_2.bias"]
    tensors["transformer.h.1.extra.weight"] = np.zeros(3, np.float32)
    tensors["transformer.wpe.weight"] = tensors["transformer.wpe.weight"][:63]
    tensors["transformer.h.0.ln_1.weight"] = tensors["transformer.h.0.ln_1.weight"].astype(np.int8)
    save_file(tensors, folder / "model.safetensors")
    message = _error(folder)
    assert "not read (readable: F64, F32, F16, BF16) (1): transformer.h.0.ln_1.weight (I8)" in message
    assert "missing tensors (1): transformer.h.1.ln_2.bias" in message
    assert "unexpected tensors (1): transformer.h.1.extra.weight" in message
    assert "shape mismatches (1): transformer.wpe.weight [63, 24] gives pos_embed.embedding [63, 24], expected [64, 24]" in message


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_a_damaged_weights_file_is_named_in_one_line(saved, tmp_path, damage):
    folder = tmp_path / damage
    shutil.copytree(saved("gpt2")[1], folder)
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2] if damage == "truncate" else b"not a checkpoint" * 4)
    message = _error(folder)
    assert f"{weights} is damaged or not a safetensors file" in message and "\n" not in message


def test_cli_on_a_damaged_checkpoint_says_so_in_one_line_and_writes_nothing(saved, tmp_path, capsys):
    folder = tmp_path / "damaged"
    shutil.copytree(saved("gpt2")[1], folder)
    (folder / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes()[:1000])
    out = tmp_path / "run"
    capsys.readouterr()  # transformers' progress bar when this test is the first to write the checkpoint
    assert main(["offsets", "--checkpoint", str(folder), "--length", "16", "--fit-t-min", "4", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("nohair offsets: error: ") and "damaged" in err and "\n" not in err
    assert not out.exists() or not any(out.iterdir())


def test_non_finite_weights_are_refused_by_name(saved, tmp_path):
    folder = tmp_path / "nan"
    shutil.copytree(saved("gpt2")[1], folder)
    tensors = load_file(folder / "model.safetensors")
    tensors["transformer.h.1.mlp.c_fc.weight"][2, 5] = np.inf
    save_file(tensors, folder / "model.safetensors")
    message = _error(folder)
    assert "tensor transformer.h.1.mlp.c_fc.weight holds 1 non-finite values (the first, inf," in message


def test_lengths_beyond_positions_or_sliding_window(saved, tmp_path):
    assert "65 tokens asked, but" in _error(saved("gpt2")[1], seq_len=65)
    assert "at most 64: its learned position table" in _error(saved("gpt2")[1], seq_len=65)
    # One window on every layer (Mistral) is computed: the whole context, the window in the config.
    hf, folder = saved("mistral_window")
    cfg = nh.load_checkpoint(folder, seq_len=64)[0].config
    assert (cfg.sliding_window, cfg.max_len) == (16, hf.config.max_position_embeddings)
    # A window on some layers only (Qwen2's layer_types, or max_window_layers without them) is computed too.
    folder = tmp_path / "window"
    shutil.copytree(saved("qwen2")[1], folder)
    config = json.loads((folder / "config.json").read_text())
    for marks in (dict(layer_types=["full_attention", "sliding_attention", "full_attention"]), dict(max_window_layers=2)):
        settings = {k: v for k, v in config.items() if k != "layer_types"}
        (folder / "config.json").write_text(json.dumps({**settings, "sliding_window": 16, "use_sliding_window": True,
                                                        **marks}))
        cfg = nh.load_checkpoint(folder, seq_len=64)[0].config
        assert (cfg.sliding_window, cfg.window_layers, cfg.max_len) == (16, (1,) if "layer_types" in marks else (2,),
                                                                      config["max_position_embeddings"])


# ---------------------------------------------------------------------------------------------
# The command line on a checkpoint.


def test_cli_offsets_on_a_checkpoint_with_text_prompts(saved, tmp_path, capsys):
    folder, tokenizer = _with_tokenizer(saved("gpt2")[1], tmp_path)
    continuation = tmp_path / "continuation.txt"
    continuation.write_text("the cat sat on the mat and ran away " * 5)
    out = tmp_path / "run"
    args = ["offsets", "--checkpoint", str(folder), "--prompt-a", "the cat", "--prompt-b", "a dog",
            "--continuation-file", str(continuation), "--fit-t-min", "4", "--n-boot", "20", "--out", str(out)]
    assert main(args) == 0
    meta = json.loads((out / "fit.json").read_text())["meta"]
    assert meta["checkpoint"] == str(folder.resolve()) and "checkpoint tokenizer" in meta["pairs"]
    model, _ = nh.load_checkpoint(folder)
    pairs = tokenized_prompt_pairs(tokenizer, ["the cat"], ["a dog"], continuation.read_text())
    assert pairs.continuations.shape == (1, 45)
    with np.load(out / "offsets.npz") as data:
        np.testing.assert_array_equal(data["l2"], nh.prompt_pair_offsets(model, *pairs).l2)

    continuation.write_text("the cat " * 32)  # 2 + 64 tokens > 64 positions
    assert main(args) == 2
    assert "exceed the model's context of 64 tokens; give --length 62 or less with --cut N" in capsys.readouterr().err
    empty_prompt = [x if x != "a dog" else "" for x in args]  # GPT-2's tokenizer adds no special tokens
    assert main(empty_prompt) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == "nohair offsets: error: prompt b '' comes to no tokens"


def test_cli_cuts_continuations_so_the_interval_is_over_them(saved, tmp_path, capsys):
    folder, tokenizer = _with_tokenizer(saved("gpt2")[1], tmp_path)
    continuation = tmp_path / "story.txt"
    words = "the cat sat on the mat and a dog ran away".split()
    continuation.write_text(" ".join(np.random.default_rng(0).choice(words, 400)))
    out = tmp_path / "cut"
    args = ["offsets", "--checkpoint", str(folder), "--prompt-a", "the cat", "--prompt-b", "a dog",
            "--continuation-file", str(continuation), "--cut", "6", "--length", "40", "--pair-seed", "3",
            "--fit-t-min", "4", "--n-boot", "50", "--out", str(out)]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "measuring 6 pairs, P = 2, T = 40" in printed and "next-token KL: peak" in printed
    cuts = nh.text_prompt_pairs(tokenize(tokenizer, continuation.read_text()), 3, 6, 1, 40).continuations
    with np.load(out / "offsets.npz") as data:
        assert data["l2"].shape == (6, 4, 40)
        model, _ = nh.load_checkpoint(folder)
        expected = nh.prompt_pair_offsets(model, np.tile([1, 3], (6, 1)), np.tile([2, 4], (6, 1)), cuts)
        np.testing.assert_array_equal(data["l2"], expected.l2)
    summary = json.loads((out / "fit.json").read_text())
    assert summary["kl_half_life"]["n_pairs"] == 6 and "6 cuts of 40 tokens" in summary["meta"]["pairs"]
    # One pair: no interval exists, and the table says so instead of printing [x, x].
    assert main([*args[:9], "--cut", "1", *args[11:]]) == 0
    assert "none (1 pair)" in capsys.readouterr().out
    assert main(["offsets", "--cut", "3", "--out", str(tmp_path / "x")]) == 2
    assert "--cut cuts continuations for text prompts" in capsys.readouterr().err


def test_cli_bound_on_a_checkpoint(saved, tmp_path, capsys):
    out = tmp_path / "bound"
    assert main(["bound", "--checkpoint", str(saved("llama_gqa")[1]), "--prompt-len", "4", "--length", "24",
                 "--pairs", "2", "--n-boot", "20", "--out", str(out)]) == 0
    assert json.loads((out / "bound.json").read_text())["model"]["mlp"] == "swiglu"
    assert "3 layers, d_model 24, rope positions" in capsys.readouterr().out


def test_the_bound_names_what_its_derivation_does_not_cover_in_each_family(saved):
    """Pythia's parallel block and Qwen3's QK-norm: the conditions are measured, the explicit constants
    are not derived (named), and neither breaks a condition of the theorem; Llama's are derived."""
    from nohair_jax.bound import measure_conditions

    tokens = np.random.default_rng(0).integers(0, 101, (1, 24))
    for name, named in (("pythia", "parallel residual"), ("qwen3", "QK-norm"), ("llama_gqa", None),
                        ("olmo2", "norms on the sublayers' outputs"), ("gemma2", "norms on the sublayers' outputs"),
                        ("phi3", None)):
        model, _ = nh.load_checkpoint(saved(name)[1])
        cond = measure_conditions(model, tokens[:, :4], tokens[:, 4:8], tokens[:, 8:])
        reasons = cond.not_derived()
        assert (reasons == []) if named is None else any(r.startswith(named) for r in reasons), (name, reasons)
        assert not [f for f in cond.failures() if named and f.startswith(named)], cond.failures()
        assert len(cond.sigma_min) == model.config.n_layers * (4 if name == "gemma2" else 2) + 1


def test_soft_capped_logits_give_b_below_the_cap_and_the_result_says_so(tmp_path, capsys):
    """Gemma 2 with a cap of 2 and q weights 10x the test model's, so that its raw logits pass the cap: B
    stays below 2 in every layer, and the bound's report says why."""
    hf = _build("gemma2")
    with torch.no_grad():
        for layer in hf.model.layers:
            layer.self_attn.q_proj.weight.mul_(10.0)
    hf.save_pretrained(tmp_path / "ckpt")
    out = tmp_path / "bound"
    assert main(["bound", "--checkpoint", str(tmp_path / "ckpt"), "--prompt-len", "4", "--length", "24", "--pairs",
                 "2", "--n-boot", "20", "--out", str(out)]) == 0
    cond = json.loads((out / "bound.json").read_text())["conditions"]
    assert max(cond["logit_bound"]) < 2.0 and cond["attn_softcap"] == 2.0
    assert cond["block_norms"] == ["attention", "attention output", "MLP", "MLP output"]
    assert "soft-capped at 2: c tanh(logit / c), so B < 2" in capsys.readouterr().out
    model, _ = nh.load_checkpoint(tmp_path / "ckpt")
    uncapped_config = dataclasses.replace(model.config, attn_softcap=None)
    uncapped = nnx.merge(nnx.graphdef(nnx.eval_shape(lambda: nh.Transformer(uncapped_config, rngs=nnx.Rngs(0)))),
                         nnx.state(model))
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, 101, (2, 28)))
    assert float(uncapped(tokens, probe=nh.BoundQuantities()).attention.max()) > 4.0  # the cap acts
