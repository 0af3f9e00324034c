"""The relay model calibrated from a real model's own attention: a prediction of every layer's offsets.

The solvable relay model (``nohair_jax.relay``, docs/definitions.md#bound) dilutes: a query at absolute
position ``n`` reads every earlier key with weight ``1 / n``. A trained model does not: it puts weight on
sinks, on recent tokens, on what matters. ``CalibratedRelay`` runs the same linear recursion with the
model's own attention and gains, read off the model on prompt pairs (``calibrate_relay``):

    delta_l(n) = m_l * ( delta_{l-1}(n) + v_l * sum_{j <= n} W_l(n, j) Delta_{l-1}(j) )

at continuation positions ``n = P + t``, where ``Delta_{l-1}(j)`` is the prompt's measured offset
``D_{l-1}(j)`` at a prompt position ``j <= P`` and the recursion's own ``delta_{l-1}(j)`` at a continuation
position (``delta_0 = 0``: the same token at the same position). Per layer ``l``:

* ``W_l [N, N]``: the attention weight query ``n`` puts on key ``j`` (``N = P + T``), averaged over heads,
  over both runs of every pair and over the pairs;
* ``v_l``: the value path's gain, ``|| W_O W_V (N(h_a) - N(h_b)) || / || h_a - h_b ||`` at each key (the
  block's input norm ``N`` applied to the two runs' finite offset, then the value and output maps summed
  over heads), the median over keys and pairs;
* ``m_l``: the MLP sublayer's gain, ``|| Delta h_l || / || Delta (h_{l-1} + attn_l) ||`` at each position,
  the median over positions and pairs (it multiplies the own path and the read alike, as the MLP acts on
  their sum);
* ``D_{l-1}(j)``: the measured offset at each prompt position, the mean over pairs.

What it assumes, and where it must fail: offsets add as scalars (every difference pointing the same way,
so norms add: an upper estimate where they cancel); the attention weights do not depend on the offsets
(a linear model: the keys' own change of the weights is left out); one gain per sublayer and layer,
whatever the position (a gain that changes with ``t`` is averaged away); the MLP linear along the
offset. It is stated for pre-LN blocks (``BlockLayout.pre_ln``). With pure dilution (``W_l(n, j) = 1 / n``)
it is ``relay.offsets`` with ``residual = m``, ``direct = relay = m v`` (tested); on a transformer built to
be the relay model it recovers the model's own constants and offsets (tested).
"""

from __future__ import annotations

import dataclasses
import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from tqdm.auto import tqdm

from nohair_jax.fit import FitRefused, PowerLawFit, fit_or_refuse
from nohair_jax.model import Probe, Transformer
from nohair_jax.offsets import check_pairs


@dataclasses.dataclass(frozen=True)
class CalibratedRelay:
    """The recursion's inputs for one model and one set of prompt pairs (module docstring).

    prompt_len: P. weights: [L, N, N] float64, row ``n`` the mean attention of query ``n`` (0-based
    sequence index) over keys ``j <= n``. value_gain, mlp_gain: [L] (``v_l``, ``m_l``). prompt_offsets:
    [L, P] ``D_{l-1}(j)``, the input of layer ``l`` at each prompt position (units of h).
    measured: [L+1, T] the mean over pairs of the measured offsets at the continuation, the
    prediction's reference (None where not measured).
    """

    prompt_len: int
    weights: np.ndarray
    value_gain: np.ndarray
    mlp_gain: np.ndarray
    prompt_offsets: np.ndarray
    measured: np.ndarray | None = None

    def __post_init__(self):
        n_layers, n, _ = self.weights.shape
        chex.assert_shape(self.weights, (n_layers, n, n))
        chex.assert_shape([self.value_gain, self.mlp_gain], (n_layers,))
        chex.assert_shape(self.prompt_offsets, (n_layers, self.prompt_len))
        if self.measured is not None:
            chex.assert_shape(self.measured, (n_layers + 1, n - self.prompt_len))

    @property
    def length(self) -> int:
        """T, the continuation's length."""
        return self.weights.shape[1] - self.prompt_len

    def offsets(self) -> np.ndarray:
        """The predicted offsets ``delta_l(t)``: float64 [L+1, T], row 0 zeros (as ``relay.offsets``)."""
        p = self.prompt_len
        rows = [np.zeros(self.length)]
        for weights, v, m, prompt in zip(self.weights, self.value_gain, self.mlp_gain, self.prompt_offsets):
            read = weights[p:] @ np.concatenate([prompt, rows[-1]])  # [T]: every key the query reads
            rows.append(m * (rows[-1] + v * read))
        return np.stack(rows)

    def alphas(self, t_min: int = 32) -> list[tuple[PowerLawFit | FitRefused, PowerLawFit | FitRefused | None]]:
        """(predicted, measured) alpha per layer 1..L on ``t`` in [``t_min``, T], each curve fitted alone
        (no interval: one curve each); measured None where the relay holds no measurement."""
        t = np.arange(1, self.length + 1)
        predicted = self.offsets()
        out = []
        for layer in range(1, len(predicted)):
            fit = fit_or_refuse(t, predicted[layer], t_min=t_min, n_boot=0)
            seen = None if self.measured is None else fit_or_refuse(t, self.measured[layer], t_min=t_min, n_boot=0)
            out.append((fit, seen))
        return out


def dilution_relay(prompt_len: int, length: int, *, value_gain, mlp_gain, prompt_offsets) -> CalibratedRelay:
    """The calibrated relay with pure dilution, ``W_l(n, j) = 1 / n`` (1-based ``n``) on every key ``j <= n``:
    the solvable model's attention, over ``prompt_len`` P prompt and ``length`` T continuation positions.
    ``value_gain``, ``mlp_gain`` [L]; ``prompt_offsets`` [L, P]."""
    value_gain, mlp_gain = np.asarray(value_gain, np.float64), np.asarray(mlp_gain, np.float64)
    n = prompt_len + length
    causal = np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]
    return CalibratedRelay(prompt_len, np.broadcast_to(causal, (len(value_gain), n, n)).copy(), value_gain, mlp_gain,
                           np.asarray(prompt_offsets, np.float64))


class _Readings(Probe):
    """Every block's attention output (``blocks``) and its attention weights averaged over heads
    (``attention`` [L, B, N, N]); ``hidden`` is the residual stream as usual."""

    def read_block(self, attn, mlp):
        return attn

    def read_attention(self, logits, weights, reads):
        return weights.mean(axis=1)


@functools.partial(jax.jit, static_argnums=0)
def _pair_readings(graphdef, state, tokens):
    """tokens int [2, N] (the pair's two runs) -> (weights [L, N, N], value-path offset and key offset
    [L, N], MLP output and input offsets [L, N], offsets [L+1, N]), norms over the feature axis."""
    model = nnx.merge(graphdef, state)
    out = model(tokens, probe=_Readings())
    hidden, attn = out.hidden, out.blocks  # [L+1, 2, N, D], [L, 2, N, D]
    cfg = model.config
    group = cfg.n_heads // cfg.kv_heads
    value_out, mlp_in = [], []
    for layer, block in enumerate(model.blocks):
        y = block.attention_input(hidden[layer])  # [2, N, D]
        dv = (y[0] - y[1]) @ block.attn.v.kernel[...]  # [N, kv * hd]: the biases cancel
        dv = jnp.repeat(dv.reshape(-1, cfg.kv_heads, cfg.head_dim), group, axis=1).reshape(dv.shape[0], -1)
        value_out.append(jnp.linalg.norm(dv @ block.attn.o.kernel[...], axis=-1))
        before_mlp = hidden[layer] + attn[layer]
        mlp_in.append(jnp.linalg.norm(before_mlp[0] - before_mlp[1], axis=-1))
    offsets = jnp.linalg.norm(hidden[:, 0] - hidden[:, 1], axis=-1)  # [L+1, N]
    return out.attention.mean(axis=1), jnp.stack(value_out), offsets[:-1], offsets[1:], jnp.stack(mlp_in), offsets


def calibrate_relay(model: Transformer, prompts_a, prompts_b, continuations, *, progress: bool = False) -> CalibratedRelay:
    """Read the calibrated relay's inputs off ``model`` on prompt pairs (shapes as ``prompt_pair_offsets``;
    prompts of equal length P), one pair at a time: the attention weights, the value and MLP gains and
    the prompt offsets (module docstring), and the measured continuation offsets beside them. Offsets and
    gains in float64 from the model's dtype; the plain attention path (it reads the weights), so memory
    grows as ``L N^2`` per pair. ValueError for a model whose blocks are not pre-LN."""
    cfg = model.config
    if not cfg.layout.pre_ln:
        raise ValueError(f"the calibrated relay is stated for pre-LN blocks, this model has {cfg.layout}")
    a, b, c = check_pairs(cfg, prompts_a, prompts_b, continuations)
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"the relay compares prompts of equal length, got P_a={a.shape[1]} and P_b={b.shape[1]}")
    p = a.shape[1]
    graphdef, state = nnx.split(model)
    weights, value_ratio, mlp_ratio, offsets = 0.0, [], [], []
    for i in tqdm(range(len(a)), desc="calibrated relay", unit="pair", disable=not progress):
        tokens = jnp.asarray(np.stack([np.concatenate([a[i], c[i]]), np.concatenate([b[i], c[i]])]))
        with jax.default_matmul_precision("highest"):
            w, value_out, key_offset, mlp_out, mlp_in, off = (
                np.asarray(x, np.float64) for x in _pair_readings(graphdef, state, tokens))
        weights = weights + w
        value_ratio.append(_ratios(value_out, key_offset))
        mlp_ratio.append(_ratios(mlp_out, mlp_in))
        offsets.append(off)
    offsets = np.mean(offsets, axis=0)  # [L+1, N]
    return CalibratedRelay(
        prompt_len=p, weights=weights / len(a), value_gain=_pooled_median(value_ratio),
        mlp_gain=_pooled_median(mlp_ratio), prompt_offsets=offsets[:-1, :p], measured=offsets[:, p:])


def _ratios(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """numerator / denominator [L, N], NaN where the denominator is 0 (no offset there to take a gain of)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(denominator > 0, numerator / denominator, np.nan)


def _pooled_median(ratios: list[np.ndarray]) -> np.ndarray:
    """[pairs] of [L, N] -> [L]: the median over pairs and positions of every defined ratio (1 where a layer
    has none: nothing reached it to scale)."""
    stacked = np.stack(ratios, axis=1).reshape(len(ratios[0]), -1)
    return np.array([np.median(row[np.isfinite(row)]) if np.isfinite(row).any() else 1.0 for row in stacked])


__all__ = ["CalibratedRelay", "calibrate_relay", "dilution_relay"]
