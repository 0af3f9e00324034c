"""Prompt-pair sampling: shapes, seeds, and cuts that really come from the text."""

import numpy as np
import pytest

import nohair_jax as nh


def test_random_pairs_shapes_range_and_seed():
    p = nh.random_prompt_pairs(3, 5, 7, 11, 50)
    assert p.prompts_a.shape == (5, 7) and p.prompts_b.shape == (5, 7) and p.continuations.shape == (5, 11)
    assert all(x.dtype == np.int32 and x.min() >= 0 and x.max() < 50 for x in p)
    same = nh.random_prompt_pairs(3, 5, 7, 11, 50)
    other = nh.random_prompt_pairs(4, 5, 7, 11, 50)
    assert all(np.array_equal(x, y) for x, y in zip(p, same))
    assert not np.array_equal(p.prompts_a, other.prompts_a)
    assert not np.array_equal(p.prompts_a, p.prompts_b)


def test_shared_continuation_is_one_row_repeated():
    p = nh.random_prompt_pairs(0, 4, 3, 9, 20, shared_continuation=True)
    assert (p.continuations == p.continuations[0]).all()


def test_text_pairs_are_cuts_of_the_text():
    text = ("The quick brown fox jumps over the lazy dog; " * 5 + "Pack my box with five dozen liquor jugs. " * 5).encode()
    tokens = np.frombuffer(text, np.uint8)
    p = nh.text_prompt_pairs(tokens, 0, 6, 8, 20)
    for arr in p:
        for row in arr:
            assert bytes(row.astype(np.uint8)) in text
    assert p.continuations.shape == (6, 20) and p.prompts_a.dtype == np.int32


@pytest.mark.parametrize(
    "args, match",
    [
        ((0, 0, 4, 4, 10), "n_pairs must be an int >= 1, got 0"),
        ((0, 2, -1, 4, 10), "prompt_len must be an int >= 1, got -1"),
        ((0, 2, 4, 0, 10), "length must be an int >= 1, got 0"),
        ((0, 2, 4, 4, 1), "vocab_size must be >= 2"),
    ],
)
def test_random_pairs_bad_sizes(args, match):
    with pytest.raises(ValueError, match=match):
        nh.random_prompt_pairs(*args)


def test_text_too_short_or_not_tokens():
    with pytest.raises(ValueError, match="the text has 5 tokens"):
        nh.text_prompt_pairs(np.arange(5), 0, 1, 2, 8)
    with pytest.raises(ValueError, match="1-D integer array"):
        nh.text_prompt_pairs(np.ones((4, 4), int), 0, 1, 2, 2)
    with pytest.raises(TypeError, match="tokens must hold integer token ids, got dtype float64"):
        nh.text_prompt_pairs(np.ones(16), 0, 1, 2, 2)
