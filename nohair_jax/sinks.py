"""Attention sinks: the share of attention that each layer's heads put on the first positions, or on any key.

A sink is a key that takes a large share of every query's attention whatever the distance. Under
pure dilution (every logit equal) key ``j``'s share at query ``i`` (0-based) is ``1 / (i + 1)``,
so a share of the first keys far above ``dilution_share`` marks them as a sink; ``key_attention``
finds sinks anywhere in the first half of a sequence (docs/definitions.md#sinks). The bound allows
such a weight only through its factor ``e^(2B)`` on ``1 / i`` (docs/definitions.md#bound;
measured on SmolLM2 in docs/contrasts.md).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from flax import struct

from nohair_jax.model import Probe, Transformer
from nohair_jax.offsets import check_tokens


class FirstKeysShare(Probe):
    """``attention`` [L, B, H, T]: the weight each query puts on keys ``0 .. keys - 1``, per layer and head."""

    keys: int = struct.field(pytree_node=False)

    def read_attention(self, logits, weights, reads):
        return weights[..., : self.keys].sum(-1)


class LaterQueriesShare(Probe):
    """``attention`` [L, B, H, T]: the mean weight the later half of the queries (``i >= T // 2``, 0-based)
    put on each key: where the attention goes, sinks included."""

    def read_attention(self, logits, weights, reads):
        return weights[:, :, weights.shape[2] // 2:].mean(axis=2)


def sink_attention(model: Transformer, tokens, *, keys: int = 1, from_query: int | None = None,
                   by_query: bool = False) -> np.ndarray:
    """tokens int [B, T] -> [L, H]: the attention weight on keys ``0 .. keys - 1``, per layer and head,
    averaged over the sequences and over the queries ``i >= from_query`` (0-based; default ``T // 2``,
    far from the first keys); ``by_query``: [L, H, T - from_query], not averaged over the queries.
    Read from ``model`` by ``FirstKeysShare`` (the plain attention path)."""
    tokens = jnp.asarray(check_tokens(model.config, tokens))
    from_query = tokens.shape[1] // 2 if from_query is None else from_query
    if not 0 <= from_query < tokens.shape[1]:
        raise ValueError(f"from_query must be in [0, {tokens.shape[1]}), got {from_query}")
    weights = model(tokens, probe=FirstKeysShare(keys=keys)).attention  # [L, B, H, T]
    weights = np.asarray(weights[..., from_query:], np.float64).mean(axis=1)  # over the sequences: [L, H, Q]
    return weights if by_query else weights.mean(axis=-1)


def dilution_share(length: int, *, keys: int = 1, from_query: int | None = None) -> float:
    """What ``sink_attention`` gives under pure dilution for a sequence of ``length`` tokens: the mean
    of ``keys / (i + 1)`` over the same queries (from ``from_query``, 0-based)."""
    from_query = length // 2 if from_query is None else from_query
    i = np.arange(from_query, length)
    return float(np.mean(np.minimum(keys, i + 1) / (i + 1)))


def key_attention(model: Transformer, tokens) -> np.ndarray:
    """tokens int [B, T] -> [L, B, H, T]: the mean attention weight the queries ``i >= T // 2`` (0-based)
    of ``model`` put on each key (``LaterQueriesShare``). Every key ``j < T // 2`` is read by all of them,
    so under pure dilution each gets ``dilution_share(T)``: a key far above it is a sink."""
    tokens = jnp.asarray(check_tokens(model.config, tokens))
    return np.asarray(model(tokens, probe=LaterQueriesShare()).attention, np.float64)
