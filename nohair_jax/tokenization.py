"""Text to token ids for prompt pairs: a checkpoint's tokenizer (``checkpoints.load_tokenizer``), or
UTF-8 bytes where there is none (the project's byte-level models)."""

from __future__ import annotations

import numpy as np

from nohair_jax.data import encode as encode_bytes
from nohair_jax.pairs import PromptPairs, text_prompt_pairs


def tokenize(tokenizer, text: str, *, special_tokens: bool = False) -> np.ndarray:
    """Token ids int32 [n] of ``text``: the tokenizer's, or UTF-8 bytes when ``tokenizer`` is None.

    ``special_tokens`` adds what the tokenizer puts around a sequence (Llama's BOS): right for a
    prompt, which starts the sequence, wrong for a continuation, which follows it.
    """
    if tokenizer is None:
        return encode_bytes(text)
    return np.asarray(tokenizer.encode(text, add_special_tokens=special_tokens).ids, dtype=np.int32)


def sequence_start(tokenizer) -> np.ndarray:
    """The ids a tokenizer puts before a text that starts a sequence: int32 [k], its BOS where the tokenizer
    adds one (``add_bos_token`` of a GGUF file or a folder's tokenizer_config.json; Gemma, Llama 2), k = 0
    for most byte-level BPE tokenizers and for UTF-8 bytes (``tokenizer`` None). Found by encoding a probe
    text with and without the tokenizer's special tokens."""
    if tokenizer is None:
        return np.zeros(0, np.int32)
    text = tokenizer.encode("a", add_special_tokens=False).ids
    both = tokenizer.encode("a", add_special_tokens=True).ids
    for k in range(len(both) - len(text) + 1):
        if both[k : k + len(text)] == text:
            return np.asarray(both[:k], np.int32)
    raise ValueError(f"the tokenizer's special tokens change the text itself ({text} alone, {both} with them)")


def tokenized_prompt_pairs(tokenizer, prompts_a: list[str], prompts_b: list[str], continuations) -> PromptPairs:
    """Text prompt pairs (the texts ``prompts_a[k]`` and ``prompts_b[k]``) and shared continuations as
    token ids (``tokenize``; prompts get the tokenizer's special tokens, continuations none).

    ``continuations`` is one text, or token ids int [k, T] (``text_continuations``): every prompt
    pair is measured with every continuation, so there are ``len(prompts_a) * k`` pairs, prompt
    pair by prompt pair. Returns PromptPairs [n, Pa], [n, Pb], [n, T]. Every prompt a must come to
    the same number of tokens, and every prompt b (pairs are measured as one batch).
    """
    if len(prompts_a) != len(prompts_b) or not prompts_a:
        raise ValueError(f"give as many prompts b as prompts a (at least one), got {len(prompts_a)} and {len(prompts_b)}")
    sides = []
    for side, texts in (("a", prompts_a), ("b", prompts_b)):
        ids = [tokenize(tokenizer, text, special_tokens=True) for text in texts]
        for text, x in zip(texts, ids):
            if x.size == 0:
                raise ValueError(f"prompt {side} {text!r} comes to no tokens")
        if len({len(x) for x in ids}) > 1:
            lengths = [len(x) for x in ids]
            raise ValueError(f"prompts {side} come to different numbers of tokens, {lengths}; pairs need equal lengths")
        sides.append(np.stack(ids))
    c = tokenize(tokenizer, continuations)[None] if isinstance(continuations, str) else np.asarray(continuations, np.int32)
    k = c.shape[0]
    return PromptPairs(np.repeat(sides[0], k, axis=0), np.repeat(sides[1], k, axis=0), np.tile(c, (len(prompts_a), 1)))


def text_continuations(tokenizer, text: str, n: int, length: int, seed: int) -> np.ndarray:
    """``n`` continuations of ``length`` tokens cut at random places (numpy PCG64, ``seed``) from
    ``text`` tokenized with ``tokenizer``: int32 [n, length]. ValueError if the text is too short."""
    stream = tokenize(tokenizer, text)
    if stream.size < length + 1:
        raise ValueError(f"the continuation text has {stream.size} tokens, too few to cut continuations of {length}")
    return text_prompt_pairs(stream, seed, n, 1, length).continuations
