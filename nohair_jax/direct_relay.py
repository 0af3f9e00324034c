"""Direct read versus relay: which path a continuation token's offset came by
(docs/definitions.md#bound).

A continuation token can feel the prompt two ways: it reads the prompt's keys and values
directly (diluted by ``1 / i``), or it reads earlier continuation tokens that carry what *they*
read (relay). To separate them, a third, patched run ``h~`` of ``a+c`` reads at every layer the
prompt's keys and values from run a but the continuation's from run b, which carry no trace of
prompt a. So ``h~`` differs from run b only by direct reads (and what the token's own residual
path and queries make of them), and from run a only by relay:

    total  = || h_a - h_b ||      direct = || h~ - h_b ||      relay = || h_a - h~ ||

with ``total <= direct + relay``. At layer 1 there is nothing to relay yet: ``h~ = h_a`` there.
With uniform attention the direct part is exactly ``const / (P + t)`` at every layer (alpha 1,
pure dilution) and the relay part carries the ``log`` factors of the bound.
"""

from __future__ import annotations

import dataclasses

import chex
import jax.numpy as jnp
import numpy as np

from nohair_jax.model import PatchedKeysValues, Transformer
from nohair_jax.offsets import check_pairs, continuation_positions, map_pairs


@dataclasses.dataclass(frozen=True)
class PathSplit:
    """total, direct, relay: [n_pairs, L+1, T] Euclidean norms (units of h) at t = 1..T."""

    total: np.ndarray
    direct: np.ndarray
    relay: np.ndarray
    prompt_len: int

    @property
    def t(self) -> np.ndarray:
        return continuation_positions(self.total.shape[-1])


def pair_path_split(model: Transformer, prompts_a, prompts_b, continuations):
    """Traceable core: int [n, P], [n, P], [n, T] -> (total, direct, relay), each [n, L+1, T]."""
    chex.assert_rank([prompts_a, prompts_b, continuations], 2)
    chex.assert_equal_shape([prompts_a, prompts_b])  # the patched run mixes a's prompt with b's continuation
    prompt_len, length = prompts_a.shape[1], continuations.shape[1]
    tokens_a = jnp.concatenate([prompts_a, continuations], axis=1)
    h_a = model(tokens_a).hidden
    h_b = model(jnp.concatenate([prompts_b, continuations], axis=1)).hidden  # [L+1, n, S, D]
    is_prompt = (jnp.arange(prompt_len + length) < prompt_len)[None, None, :, None]
    h_mix = model(tokens_a, probe=PatchedKeysValues(per_layer=jnp.where(is_prompt, h_a[:-1], h_b[:-1]))).hidden

    def dist(x, y):  # [L+1, n, S, D] -> [n, L+1, T] on the continuation
        return jnp.moveaxis(jnp.linalg.norm(x[:, :, -length:] - y[:, :, -length:], axis=-1), 0, 1)

    return dist(h_a, h_b), dist(h_mix, h_b), dist(h_a, h_mix)


def direct_relay_split(
    model: Transformer, prompts_a, prompts_b, continuations, *, float64: bool = False, progress: bool = False
) -> PathSplit:
    """Split every pair's offset into its direct and relay parts; inputs as ``prompt_pair_offsets``.

    Prompts must have equal length (the patched run lines positions up between the runs).
    """
    a, b, c = check_pairs(model.config, prompts_a, prompts_b, continuations)
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"the direct/relay split needs prompts_a and prompts_b of equal length, got {a.shape[1]} and {b.shape[1]}")
    total, direct, relay = map_pairs(pair_path_split, model, a, b, c, float64=float64, progress=progress)
    return PathSplit(total=total, direct=direct, relay=relay, prompt_len=a.shape[1])
