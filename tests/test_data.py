"""Data: the byte tokenizer, the embedded corpus, text files, Markov languages, held-out pairs."""

import sys

import numpy as np
import pytest

from nohair_jax import data
from nohair_jax.pairs import text_prompt_pairs


def test_encode_decode_round_trip():
    text = "Prompts fade — slowly. ß°…"
    tokens = data.encode(text)
    assert tokens.dtype == np.int32 and tokens.min() >= 0 and tokens.max() < 256
    assert tokens.size == len(text.encode("utf-8"))
    assert data.decode(tokens) == text
    assert data.decode(tokens[:-1]).endswith("\ufffd")  # a cut through a character is replaced
    with pytest.raises(ValueError, match="byte values"):
        data.decode([72, 256])


def test_stdlib_corpus_is_deterministic_and_split_as_documented():
    first, second = data.stdlib_corpus.__wrapped__(), data.stdlib_corpus.__wrapped__()  # two real builds
    assert np.array_equal(first.train, second.train) and np.array_equal(first.heldout, second.heldout)
    assert first.fingerprint() == second.fingerprint()
    corpus = data.stdlib_corpus()
    assert not corpus.train.flags.writeable and not corpus.heldout.flags.writeable
    n_train, n_heldout = corpus.train.size, corpus.heldout.size
    assert f"{n_train:,} train, {n_heldout:,} held out" in corpus.description
    assert 0.05 <= n_heldout / (n_train + n_heldout) <= 0.10
    assert "Python 3." in corpus.description
    if sys.version_info[:3] == (3, 11, 7):  # the sizes the docstring and docs/training.md give
        assert (n_train, n_heldout) == (655_299, 52_236)


def test_stdlib_heldout_text_is_not_in_train():
    corpus = data.stdlib_corpus()
    train = corpus.train.astype(np.uint8).tobytes()
    heldout = corpus.heldout.astype(np.uint8).tobytes()
    # Repeated paragraphs are dropped; what remains shared is a few near-duplicate passages.
    starts = range(0, len(heldout) - 300, 50)
    shared = sum(train.find(heldout[s : s + 300]) != -1 for s in starts)
    assert shared <= 0.01 * len(starts)


def test_load_corpus_splits_at_a_line_start(tmp_path):
    path = tmp_path / "story.txt"
    lines = [f"line {i}: the prompt fades.\n" for i in range(100)]
    path.write_text("".join(lines), encoding="utf-8")
    corpus = data.load_corpus(path, heldout_fraction=0.1)
    assert corpus.name == "story"
    assert data.decode(corpus.train) + data.decode(corpus.heldout) == "".join(lines)
    assert data.decode(corpus.heldout).startswith("line ")
    assert abs(corpus.heldout.size - 0.1 * path.stat().st_size) <= len(lines[0])
    assert str(path) in corpus.description


@pytest.mark.parametrize(
    "content, message",
    [(None, "does not exist"), (b"", "is empty"), (b"text\x00more", "NUL"), (b"caf\xe9 \xff", "not UTF-8")],
)
def test_load_corpus_errors_name_the_path(tmp_path, content, message):
    path = tmp_path / "corpus.bin"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ValueError, match=message) as err:
        data.load_corpus(path)
    assert str(path) in str(err.value)


def test_markov_languages_are_sparse_stochastic_and_differ():
    probs = data.markov_languages(seed=3, n_languages=3, alphabet=16, branching=3)
    assert probs.shape == (3, 16, 16)
    np.testing.assert_allclose(probs.sum(-1), 1.0)
    assert np.all((probs > 0).sum(-1) == 3)
    supports = probs > 0
    assert not np.array_equal(supports[0], supports[1]) and not np.array_equal(supports[1], supports[2])


def test_markov_text_follows_its_language():
    probs = data.markov_languages(seed=1, n_languages=2, alphabet=16, branching=2)
    symbol = {b: s for s, b in enumerate(data.MARKOV_SYMBOLS)}
    for lang in range(2):
        text = data.markov_text(probs[lang], 2000, seed=[1, lang])
        ids = np.array([symbol[b] for b in text.tolist()])
        assert np.all(probs[lang, ids[:-1], ids[1:]] > 0)  # every transition is allowed
    # The other language would not allow them all.
    assert not np.all(probs[1, ids[:-1], ids[1:]] > 0) or not np.all(probs[0, ids[:-1], ids[1:]] > 0)


def test_markov_corpus_is_deterministic_per_seed():
    kwargs = dict(n_languages=3, alphabet=16, doc_len=256, docs_per_language=4, heldout_docs_per_language=1)
    a, b, c = data.markov_corpus(5, **kwargs), data.markov_corpus(5, **kwargs), data.markov_corpus(6, **kwargs)
    assert np.array_equal(a.train, b.train) and np.array_equal(a.heldout, b.heldout)
    assert not np.array_equal(a.train, c.train)
    separators = len(data.DOCUMENT_SEPARATOR)
    assert a.train.size == 9 * 256 + 8 * separators and a.heldout.size == 3 * 256 + 2 * separators
    with pytest.raises(ValueError, match="heldout_docs_per_language"):
        data.markov_corpus(0, docs_per_language=2, heldout_docs_per_language=2)


def test_heldout_prompt_pairs_wrap_text_prompt_pairs():
    corpus = data.markov_corpus(0, alphabet=16, doc_len=256, docs_per_language=4, heldout_docs_per_language=1)
    pairs = data.heldout_prompt_pairs(corpus, 7, 3, 5, 40)
    expected = text_prompt_pairs(corpus.heldout, 7, 3, 5, 40)
    for got, want in zip(pairs, expected):
        np.testing.assert_array_equal(got, want)
