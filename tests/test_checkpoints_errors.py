"""Bad input to the checkpoint loaders and the commands that take checkpoints: each one is refused (or
warned about) in one line that names it, never a traceback from deep inside JAX, a silent wrong result
or a machine run out of memory. The checkpoints are written here from numpy (a Llama of one layer, d_model
16) or, for GGUF, as metadata alone (tests/gguf_writer.py): nothing is downloaded, no torch model built."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

pytest.importorskip("safetensors")
pytest.importorskip("tokenizers")
pytest.importorskip("gguf")

import nohair_jax as nh  # noqa: E402
from nohair_jax.checkpoints import load_model, load_tokenizer  # noqa: E402
from nohair_jax.cli import main  # noqa: E402
from gguf_writer import write_gguf  # noqa: E402

LLAMA = dict(model_type="llama", vocab_size=320, hidden_size=16, intermediate_size=32, num_attention_heads=2,
             num_hidden_layers=1, max_position_embeddings=64)


def llama_folder(folder, **config):
    """A Hugging Face folder of a one-layer Llama (``LLAMA``), random weights, no tokenizer.json; ``config``
    changes config.json only (the weights stay ``LLAMA``'s)."""
    from safetensors.numpy import save_file

    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps({**LLAMA, **config}))
    d, ff, v = LLAMA["hidden_size"], LLAMA["intermediate_size"], LLAMA["vocab_size"]
    shapes = {"model.embed_tokens.weight": (v, d), "model.norm.weight": (d,), "lm_head.weight": (v, d),
              "model.layers.0.input_layernorm.weight": (d,), "model.layers.0.post_attention_layernorm.weight": (d,),
              **{f"model.layers.0.self_attn.{n}_proj.weight": (d, d) for n in "qkvo"},
              "model.layers.0.mlp.gate_proj.weight": (ff, d), "model.layers.0.mlp.up_proj.weight": (ff, d),
              "model.layers.0.mlp.down_proj.weight": (d, ff)}
    rng = np.random.default_rng(0)
    save_file({name: rng.normal(0, 0.1, shape).astype(np.float32) for name, shape in shapes.items()},
              str(folder / "model.safetensors"))
    return folder


def one_line_error(call, error=nh.CheckpointError) -> str:
    with pytest.raises(error) as info:
        call()
    message = str(info.value)
    assert "\n" not in message, message
    return message


# ---------------------------------------------------------------------------------------------
# Text and a checkpoint without a tokenizer.


def test_text_prompts_on_a_checkpoint_without_a_tokenizer_are_refused(tmp_path, capsys):
    folder = llama_folder(tmp_path / "model")
    continuation = tmp_path / "continuation.txt"
    continuation.write_text("the cat sat on the mat")
    messages = tmp_path / "messages.txt"
    messages.write_text("hello")
    out = tmp_path / "run"
    offsets = ["offsets", "--checkpoint", str(folder), "--prompt-a", "the cat", "--prompt-b", "a dog",
               "--continuation-file", str(continuation), "--fit-t-min", "4", "--out", str(out)]
    prompts = ["prompts", "--checkpoint", str(folder), "--system", "a", "--system", "b", "--messages", str(messages),
               "--raw", "--out", str(out)]
    for args in (offsets, prompts):
        assert main(args) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and f"--checkpoint {str(folder)!r} has no tokenizer (tokenizer.json): text" in err, err
    assert not out.exists()


def test_a_folder_without_tokenizer_json_says_text_would_be_read_as_bytes(tmp_path):
    folder = llama_folder(tmp_path / "model")
    with pytest.warns(UserWarning) as caught:
        model, tokenizer = nh.load_checkpoint(folder)
    assert tokenizer is None and model.config.vocab_size == 320
    [warning] = caught
    assert str(warning.message) == (
        f"{folder} has no tokenizer.json: the tokenizer is None, and text tokenized with None is read as UTF-8 "
        "bytes (ids 0-255), not as this model's 320-token vocabulary means it")


# ---------------------------------------------------------------------------------------------
# float64 without 64-bit JAX.


def test_float64_needs_64_bit_jax(tmp_path):
    folder = llama_folder(tmp_path / "model")
    with jax.enable_x64(False):
        message = one_line_error(lambda: load_model(folder, dtype="float64"))
    assert message == "dtype float64 needs 64-bit JAX: run under jax.enable_x64(True) or set JAX_ENABLE_X64=1"
    llama_folder(tmp_path / "config64", torch_dtype="float64")
    with jax.enable_x64(False):
        message = one_line_error(lambda: load_model(tmp_path / "config64"))
    assert message == (f"{tmp_path / 'config64' / 'config.json'}: its dtype float64 needs 64-bit JAX: run under "
                       "jax.enable_x64(True), set JAX_ENABLE_X64=1, or pass dtype='float32'")
    with jax.enable_x64(True):
        model = load_model(folder, dtype="float64")
        assert model.config.dtype == "float64" and model.embed.embedding[...].dtype == np.float64


# ---------------------------------------------------------------------------------------------
# A config too big for the machine: refused before the skeleton is built.


@pytest.mark.parametrize("field, value", [("num_hidden_layers", 10**9), ("vocab_size", 10**12)])
def test_a_config_too_big_for_this_machine_is_refused_naming_its_sizes(tmp_path, field, value):
    folder = llama_folder(tmp_path / "model", **{field: value})  # the skeleton of the config would hang
    message = one_line_error(lambda: load_model(folder))
    assert message.startswith(f"{folder / 'config.json'}: the config asks for at least ") and "GiB in float32" in message
    assert f"{field} {value}" in message and "more than this machine's" in message


def test_a_gguf_file_too_big_for_this_machine_names_its_metadata(tmp_path):
    sizes = {"block_count": 10**9, "embedding_length": 16, "feed_forward_length": 32, "attention.head_count": 2,
             "context_length": 64, "attention.layer_norm_rms_epsilon": 1e-5, "vocab_size": 32}
    path = write_gguf(tmp_path / "big.gguf", metadata={f"llama.{k}": v for k, v in sizes.items()})
    message = one_line_error(lambda: load_model(path))
    assert "llama.block_count 1000000000, llama.embedding_length 16, llama.feed_forward_length 32" in message


# ---------------------------------------------------------------------------------------------
# seq_len.


@pytest.mark.parametrize("seq_len", ["100", -5, 0, 2.5, True])
def test_a_bad_seq_len_is_named(tmp_path, seq_len):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA))  # refused before the weights are looked for
    message = one_line_error(lambda: nh.load_checkpoint(folder, seq_len=seq_len), ValueError)
    assert message == f"seq_len must be an int >= 1, got {seq_len!r}"


# ---------------------------------------------------------------------------------------------
# GGUF alignment.


@pytest.mark.parametrize("alignment", [0, 3])
def test_a_gguf_alignment_that_is_not_a_power_of_two_is_named(tmp_path, alignment):
    path = write_gguf(tmp_path / "aligned.gguf", metadata={"general.alignment": alignment})
    message = one_line_error(lambda: load_tokenizer(path))
    assert message == (f"{path} is a damaged or truncated GGUF file (ValueError: general.alignment is {alignment}, "
                       "not a power of 2)")


# ---------------------------------------------------------------------------------------------
# A literal "\u2581" in text, in a SentencePiece GGUF tokenizer.

# Runs of "▁" at the start, amid and at the end of the text, next to real spaces: transformers puts no "▁" in
# front of a text that starts with one (a space included), where llama.cpp puts one in front of every text.
SPACE_TEXTS = ("▁", "▁▁", "▁▁▁", "▁▁▁▁", "a▁▁b", "the▁cat", "x▁", "▁the", " ▁the", "▁ ▁", "  ▁", "a ▁▁ b", "the ▁ cat",
               "is▁▁▁it", " the", "  two  spaces")


@pytest.mark.parametrize("case", ["llama", "phi3", "gemma2"])
def test_a_literal_sentencepiece_space_gives_transformers_ids(tmp_path, case):
    from test_gguf_tokenizer import both_tokenizers

    _, ours, theirs, tokens, _ = both_tokenizers(tmp_path, case)
    for text in SPACE_TEXTS:
        ids, expected = ours.encode(text, add_special_tokens=True).ids, theirs.encode(text)
        assert ids == expected, (text, [tokens[i] for i in ids], [tokens[i] for i in expected])
