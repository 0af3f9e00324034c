"""Prompt pairs to measure with: random tokens, or prompts and continuations cut from a text.

Every draw comes from an explicit seed (numpy's PCG64), on the host, so the same seed gives the
same pairs on any machine and any JAX backend.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from nohair_jax.checks import check_int, integer_array


class PromptPairs(NamedTuple):
    """prompts_a, prompts_b: int32 [n_pairs, P]; continuations: int32 [n_pairs, T]."""

    prompts_a: np.ndarray
    prompts_b: np.ndarray
    continuations: np.ndarray


def _check_sizes(n_pairs: int, prompt_len: int, length: int) -> None:
    for name, value in (("n_pairs", n_pairs), ("prompt_len", prompt_len), ("length", length)):
        check_int(name, value)


def random_prompt_pairs(
    seed: int, n_pairs: int, prompt_len: int, length: int, vocab_size: int, *, shared_continuation: bool = False
) -> PromptPairs:
    """Uniformly random tokens in [0, vocab_size); prompts a and b drawn independently.

    Args:
      seed: numpy PCG64 seed; the same seed gives the same pairs.
      n_pairs: N >= 1 pairs.
      prompt_len: P >= 1 tokens in each prompt.
      length: T >= 1 tokens of continuation.
      vocab_size: >= 2, the model's vocabulary.
      shared_continuation: every pair gets the same continuation (still shape [N, T]).

    Returns:
      ``PromptPairs(prompts_a [N, P], prompts_b [N, P], continuations [N, T])``, int32.
    """
    _check_sizes(n_pairs, prompt_len, length)
    if vocab_size < 2:
        raise ValueError(f"vocab_size must be >= 2 for two different prompts, got {vocab_size}")
    rng = np.random.default_rng(seed)
    a = rng.integers(0, vocab_size, (n_pairs, prompt_len), dtype=np.int32)
    b = rng.integers(0, vocab_size, (n_pairs, prompt_len), dtype=np.int32)
    rows = 1 if shared_continuation else n_pairs
    c = rng.integers(0, vocab_size, (rows, length), dtype=np.int32)
    return PromptPairs(a, b, np.ascontiguousarray(np.broadcast_to(c, (n_pairs, length))))


def text_prompt_pairs(
    tokens, seed: int, n_pairs: int, prompt_len: int, length: int, *, shared_continuation: bool = False,
    start=(),
) -> PromptPairs:
    """Prompts and continuations cut from one token stream (for example the bytes of a text).

    Each pair takes three independent random cuts of the stream: prompt a, prompt b
    (``prompt_len`` tokens each) and the continuation (``length`` tokens), so the continuation is
    real text that neither prompt leads into (except by chance, when cuts touch).

    Args:
      tokens: int [n] token ids, n > max(prompt_len, length) (a text tokenized with the model's
        tokenizer: ``tokenization.tokenize``; bytes for the project's byte-level models).
      seed: numpy PCG64 seed of the cut positions; the same seed gives the same pairs.
      n_pairs: N >= 1 pairs.
      prompt_len: P >= 1 tokens in each prompt.
      length: T >= 1 tokens of continuation.
      shared_continuation: one continuation cut, shared by every pair (still shape [N, T]).
      start: ids that begin every prompt, within its ``prompt_len`` (the tokenizer's BOS, which a model
        trained with it expects first: ``tokenization.sequence_start``); the cut fills the rest.

    Returns:
      ``PromptPairs(prompts_a [N, P], prompts_b [N, P], continuations [N, T])``, int32. ValueError
      for a stream that is not 1-D, holds a negative id or is too short for the cuts; TypeError for one
      that is not integers.
    """
    _check_sizes(n_pairs, prompt_len, length)
    start = np.asarray(start, np.int32).reshape(-1)
    if start.size >= prompt_len:
        raise ValueError(f"prompt_len {prompt_len} leaves no room for text after the {start.size} start token(s)")
    stream = np.asarray(integer_array("tokens", tokens))
    if stream.ndim != 1:
        raise ValueError(f"tokens must be a 1-D integer array, got shape {stream.shape}")
    if stream.size and stream.min() < 0:
        raise ValueError(f"tokens must be token ids >= 0, got {stream.min()} at index {int(np.argmin(stream))}")
    if stream.size < max(prompt_len, length) + 1:
        raise ValueError(f"the text has {stream.size} tokens, too few for cuts of {prompt_len} and {length}")
    rng = np.random.default_rng(seed)

    def cuts(rows: int, size: int) -> np.ndarray:
        starts = rng.integers(0, stream.size - size + 1, rows)
        return stream[starts[:, None] + np.arange(size)].astype(np.int32)

    a, b = (np.concatenate([np.broadcast_to(start, (n_pairs, start.size)), cuts(n_pairs, prompt_len - start.size)], 1)
            .astype(np.int32) for _ in "ab")
    c = cuts(1 if shared_continuation else n_pairs, length)
    return PromptPairs(a, b, np.ascontiguousarray(np.broadcast_to(c, (n_pairs, length))))
