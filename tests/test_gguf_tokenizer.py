"""SentencePiece tokenizers of GGUF files (``nohair_jax.checkpoints.gguf_tokenizer``) against transformers'
GGUF tokenizer, which builds the same kind of tokenizer from the same metadata with its own code.

A tiny SentencePiece vocabulary (tests/gguf_writer.py: byte pieces, characters, pieces that compete
for merges, control and user-defined tokens) is written under three architectures, as llama.cpp writes
Llama 2, Gemma and Phi-3 files; texts of its characters, and characters outside it (byte fallback),
must give transformers' ids, BOS included, and decode back. Byte-level BPE files are tested with the
models in test_gguf_checkpoint.py.
"""

from __future__ import annotations

import numpy as np
import pytest

transformers = pytest.importorskip("transformers")
pytest.importorskip("gguf")

import nohair_jax as nh  # noqa: E402
from nohair_jax.checkpoints import load_tokenizer  # noqa: E402
from nohair_jax.checkpoints.gguf_tokenizer import gguf_tokenizer  # noqa: E402
from gguf_writer import SP_CHARS, sentencepiece_vocab, write_gguf  # noqa: E402

# Texts of the vocabulary's characters, and some outside it: "é", "ü", "\n", "z" fall back to bytes.
TEXTS = ("the cat is in the street", "I is 123 the", "IT's the end.", "ther the there", "and an and a",
         "é and ü", "the\nend z")


def random_texts(n: int = 40) -> list[str]:
    """Texts of random words from the vocabulary's characters: merges compete in every one."""
    rng = np.random.default_rng(3)
    letters = [c for c in SP_CHARS if c != "▁"] + [" "] * 4
    return ["".join(rng.choice(letters, rng.integers(3, 30))).strip() or "the" for _ in range(n)]


def sentencepiece_file(tmp_path, arch: str, scores: str = "random", **metadata):
    return write_gguf(tmp_path / f"{arch}_{scores}.gguf", arch=arch, tokenizer_model="llama", scores=scores,
                      metadata={f"tokenizer.ggml.{key}": value for key, value in metadata.items()})


def hf_tokenizer(path):
    return transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)


# architecture, scores, texts. Llama: merges ranked by score, a space put in front of the text.
# Gemma: no space in front, scores in file order (transformers ranks Gemma's merges by position).
# Phi-3: text that starts with spaces, control and user-defined tokens amid text (transformers' Llama
# tokenizer puts its space in front of the first piece only, llama.cpp and Phi-3's in front of each).
CASES = {
    "llama": ("llama", "random", TEXTS + tuple(random_texts())),
    "gemma2": ("gemma2", "position", TEXTS + ("<start_of_turn>the<end_of_turn>  is", " the <mask>it")),
    "phi3": ("phi3", "random", TEXTS + ("  two  spaces", "<start_of_turn>the cat<end_of_turn> is", "it<mask> is")),
}


def both_tokenizers(tmp_path, case: str):
    """(the file, ours, transformers', the vocabulary's tokens, the texts) of ``CASES[case]``."""
    arch, scores, texts = CASES[case]
    path = sentencepiece_file(tmp_path, arch, scores)
    return path, gguf_tokenizer(path), hf_tokenizer(path), sentencepiece_vocab(scores)[0], texts


@pytest.mark.parametrize("case", list(CASES))
def test_sentencepiece_ids_match_transformers(tmp_path, case):
    path, ours, theirs, tokens, texts = both_tokenizers(tmp_path, case)
    for text in texts:
        ids = ours.encode(text, add_special_tokens=True).ids
        assert ids == theirs.encode(text), (text, [tokens[i] for i in ids])
        assert ids[0] == tokens.index("<s>") and ours.encode(text, add_special_tokens=False).ids == ids[1:]
        if "<" not in text:  # control tokens are followed by a space of their own (llama.cpp's prefix)
            assert ours.decode(ids) == text
    assert load_tokenizer(path).encode(texts[0]).ids == ours.encode(texts[0]).ids


def test_merges_are_ranked_by_score_not_by_position(tmp_path):
    # The same vocabulary with its scores in file order tokenizes some texts otherwise, so the
    # comparison with transformers above tells a reader that ranks merges by position from one that
    # ranks them by score.
    by_score = gguf_tokenizer(sentencepiece_file(tmp_path, "llama", "random"))
    by_position = gguf_tokenizer(sentencepiece_file(tmp_path, "llama", "position"))
    texts = TEXTS + tuple(random_texts())
    differ = [text for text in texts if by_score.encode(text).ids != by_position.encode(text).ids]
    assert differ  # 4 of the 47 texts differ


def test_unknown_characters_fall_back_to_bytes(tmp_path):
    tokenizer = gguf_tokenizer(sentencepiece_file(tmp_path, "llama"))
    tokens = sentencepiece_vocab()[0]
    ids = tokenizer.encode("é", add_special_tokens=False).ids
    assert [tokens[i] for i in ids] == ["▁", "<0xC3>", "<0xA9>"]  # "é" is C3 A9 in UTF-8
    assert tokenizer.decode(ids) == "é"


def test_bos_and_eos_follow_the_file(tmp_path):
    tokens = sentencepiece_vocab()[0]
    plain = gguf_tokenizer(sentencepiece_file(tmp_path, "llama")).encode("the", add_special_tokens=True).ids
    both = gguf_tokenizer(sentencepiece_file(tmp_path, "phi3", add_eos_token=True)).encode("the", add_special_tokens=True).ids
    neither = gguf_tokenizer(sentencepiece_file(tmp_path, "gemma2", add_bos_token=False)).encode(
        "the", add_special_tokens=True).ids
    assert plain == [tokens.index("<s>"), tokens.index("▁the")]
    assert both == [tokens.index("<s>"), tokens.index("▁the"), tokens.index("</s>")]
    assert neither == [tokens.index("the")]  # Gemma: no space in front, no BOS when the file says so


@pytest.mark.parametrize("metadata, message", [
    (dict(add_bos_token="yes"), "tokenizer.ggml.add_bos_token"),
    (dict(add_space_prefix=1), "tokenizer.ggml.add_space_prefix"),
])
def test_a_damaged_switch_is_one_line_naming_it(tmp_path, metadata, message):
    path = sentencepiece_file(tmp_path, "llama", **metadata)
    with pytest.raises(nh.CheckpointError) as info:
        gguf_tokenizer(path)
    assert message in str(info.value) and str(path) in str(info.value) and "\n" not in str(info.value)
