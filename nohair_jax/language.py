"""What a loaded language model says: its perplexity on a text and its greedy continuation.

Sanity checks that an imported checkpoint is the model it claims to be, before anything is
measured on it (``tests/test_gguf_checkpoint.py``, the real-model experiment's summary).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from nohair_jax.model import Transformer
from nohair_jax.offsets import check_pairs


@functools.partial(jax.jit, static_argnames="graphdef")
def _next_token_nll(graphdef, state, tokens):
    logits = nnx.merge(graphdef, state)(tokens).logits[:, :-1].astype(jnp.float32)
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1)[..., 0]


def perplexity(model: Transformer, tokens) -> float:
    """exp of the mean next-token negative log-likelihood of ``tokens`` int [B, S] (S >= 2), over
    every predicted token (positions 2..S of each row)."""
    tokens = np.asarray(tokens)
    if tokens.ndim != 2 or tokens.shape[1] < 2:
        raise ValueError(f"tokens must have shape [batch, length >= 2], got {tokens.shape}")
    _, _, tokens = check_pairs(model.config, tokens[:, :1], tokens[:, :1], tokens)  # range-checks the ids
    graphdef, state = nnx.split(model)
    with jax.default_matmul_precision("highest"):
        nll = np.asarray(_next_token_nll(graphdef, state, jnp.asarray(tokens)), np.float64)
    return float(np.exp(nll.mean()))


def greedy_continuation(model: Transformer, tokens, new_tokens: int) -> np.ndarray:
    """The ``new_tokens`` ids int [new_tokens] that greedy decoding appends to ``tokens`` int [S].

    One full forward per token, no cache (for short checks, not for generation at length). The
    sequence is padded to its final width so that one program serves every step: the model is
    causal, so the logits at position i do not depend on the padding after it.
    """
    prompt = np.asarray(tokens, np.int32).reshape(-1)
    if not (isinstance(new_tokens, int) and new_tokens >= 1):
        raise ValueError(f"new_tokens must be an int >= 1, got {new_tokens!r}")
    seq = np.zeros((1, prompt.size + new_tokens), np.int32)
    seq[0, : prompt.size] = prompt
    graphdef, state = nnx.split(model)
    forward = jax.jit(lambda s, x, i: nnx.merge(graphdef, s)(x).logits[0, i])
    with jax.default_matmul_precision("highest"):
        for i in range(prompt.size, seq.shape[1]):
            seq[0, i] = int(jnp.argmax(forward(state, jnp.asarray(seq), i - 1)))
    return seq[0, prompt.size :]
