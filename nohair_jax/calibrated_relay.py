"""The relay model calibrated from a real model's own attention: a prediction of every layer's offsets.

The solvable relay model (``nohair_jax.relay``, docs/definitions.md#bound) dilutes: a query at absolute
position ``n`` reads every earlier key with weight ``1 / n``. A trained model does not: it puts weight on
sinks, on recent tokens, on what matters, and each head reads through a value path of its own.
``CalibratedRelay`` runs a recursion of offset norms with the model's own heads, read off the model on
prompt pairs (``calibrate_relay``). At continuation position ``t`` (query ``n = P + t``), layer ``l``:

    r_l(t)     = kappa_l * ( s_l(t) + sum_{u <= t} A_l(t, u) delta_{l-1}(u) )               (the attention's read)
    x_l(t)     = sqrt( delta_{l-1}(t)^2 + r_l(t)^2 + 2 rho_l delta_{l-1}(t) r_l(t) )          (own path + read)
    delta_l(t) = m_l * x_l(t) * (x_l(t) / x*_l)^beta_l                                      (the MLP)

with ``delta_0 = 0`` (the same token at the same position). Per layer, from the model's own readings:

* ``s_l(t) = sum_h sum_{j <= P} W^h_l(n, j) || U^h_l(j) ||`` (``prompt_read``): the read of the prompt, head by
  head: ``W^h_l`` head ``h``'s attention weights (the mean of the pair's two runs), ``U^h_l(j) = W_O^h W_V^h
  (N(h^a_{l-1}(j)) - N(h^b_{l-1}(j)))`` the offset at prompt key ``j`` through the block's input norm ``N`` and
  that head's value and output maps (measured: the source, as the measured prompt offsets are);
* ``A_l(t, u) = sum_h W^h_l(n, P + u) g^h_l(u)`` (``relay_weights``): the read of earlier continuation keys,
  ``g^h_l(u) = || U^h_l(P + u) || / delta_{l-1}(u)`` head ``h``'s value gain at that key. Per head and per key,
  because averaging over heads mixes heads that read the prompt with heads that do not, and one gain for
  every key gives a sink (a key taking much attention through a value that carries almost nothing) the
  gain of an ordinary key;
* ``kappa_l`` (``coherence``): the median over positions of ``|| Delta attn_l || / (s_l + sum_u A_l delta_{l-1})``,
  the attention sublayer's measured offset over the sum of its per-head, per-key reads' norms: how much of
  the read survives the sum of vectors pointing different ways (it also holds what the read leaves out,
  the change of the weights themselves; near 0.2 in SmolLM2);
* ``rho_l`` (``cosine``): the median over positions of the cosine between the own path's offset
  ``Delta h_{l-1}`` and the attention's ``Delta attn_l``, measured (near 0 in SmolLM2: they add in quadrature);
* ``m_l, beta_l, x*_l`` (``mlp_gain``, ``mlp_exponent``, ``mlp_size``): the MLP sublayer's gain
  ``|| Delta h_l || / || Delta (h_{l-1} + attn_l) ||`` as a power of the size ``x`` of the offset it acts on,
  least squares of its log on ``log x`` over positions and pairs, ``m_l`` its value at ``x*_l``, the median
  size (the MLP is not linear: its gain grows as the offset shrinks, strongly in SmolLM2's first layer).

What it assumes, and where it must fail: offsets enter as norms, their directions summarised by two
numbers per layer that do not depend on ``t`` (``kappa``, ``rho``: where the read's coherence changes with
``t``, for instance as attention spreads over more keys, the prediction errs, and the error compounds
over the layers); the attention weights are those of the two runs, not changed by the offsets (the
change of the weights is only in ``kappa``); a sink's constant read (key 0 differs between the prompts
and takes weight that does not dilute) enters as every other read, in every layer; the MLP's gain depends
on the offset's size alone, and fitted over positions, whose size falls with ``t``, ``beta`` partly takes
in how the gain changes along ``t`` for other reasons (so the MLP's share of the exponent is read off
the pair, not predicted). Calibrated on the pairs it predicts: the constants are medians over positions,
the reads and gains per key are the pair's own. Stated for pre-LN blocks (``BlockLayout.pre_ln``); a
sliding window is in the weights. With one head, pure dilution (``W(n, j) = 1 / n``), ``kappa = rho = 1``
and ``beta = 0`` it is ``relay.offsets`` with ``residual = m``, ``direct = relay = m v`` (tested); on a
transformer built to be the relay model, with one head or heads reading differently, it recovers the
model's constants and predicts its offsets (tested).
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

    prompt_len: P. prompt_read: [L, T] ``s_l(t)`` (units of h). relay_weights: [L, T, T] ``A_l(t, u)``, zero
    above the diagonal (a gain: units of h per unit of offset). coherence, cosine: [L] ``kappa_l``, ``rho_l``.
    mlp_gain, mlp_exponent, mlp_size: [L] ``m_l``, ``beta_l``, ``x*_l``. value_gain: [L] the value path's gain,
    heads summed, ``|| sum_h U^h_l(j) || / || h^a_{l-1}(j) - h^b_{l-1}(j) ||``, the median over keys and pairs
    (reported beside; the recursion reads each head's gain at each key). measured: [L+1, T] the mean over
    pairs of the measured offsets at the continuation, the prediction's reference (None where not measured).
    """

    prompt_len: int
    prompt_read: np.ndarray
    relay_weights: np.ndarray
    coherence: np.ndarray
    cosine: np.ndarray
    mlp_gain: np.ndarray
    mlp_exponent: np.ndarray
    mlp_size: np.ndarray
    value_gain: np.ndarray
    measured: np.ndarray | None = None

    def __post_init__(self):
        n_layers, length = self.prompt_read.shape
        chex.assert_shape(self.relay_weights, (n_layers, length, length))
        chex.assert_shape([self.coherence, self.cosine, self.mlp_gain, self.mlp_exponent, self.mlp_size,
                           self.value_gain], (n_layers,))
        if self.measured is not None:
            chex.assert_shape(self.measured, (n_layers + 1, length))

    @property
    def length(self) -> int:
        """T, the continuation's length."""
        return self.prompt_read.shape[1]

    def offsets(self) -> np.ndarray:
        """The predicted offsets ``delta_l(t)``: float64 [L+1, T], row 0 zeros (as ``relay.offsets``)."""
        rows = [np.zeros(self.length)]
        for layer, (source, weights) in enumerate(zip(self.prompt_read, self.relay_weights)):
            own = rows[-1]
            read = self.coherence[layer] * (source + weights @ own)
            x = np.sqrt(np.maximum(own**2 + read**2 + 2 * self.cosine[layer] * own * read, 0.0))
            with np.errstate(divide="ignore", invalid="ignore"):  # x = 0: nothing reached it, nothing leaves
                mlp = self.mlp_gain[layer] * x * (x / self.mlp_size[layer]) ** self.mlp_exponent[layer]
            rows.append(np.where(x > 0, mlp, 0.0))
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


def dilution_relay(prompt_len: int, length: int, *, value_gain, mlp_gain, prompt_offsets, coherence=1.0) -> CalibratedRelay:
    """The calibrated relay of one head with pure dilution, ``W_l(n, j) = 1 / n`` (1-based ``n``) on every key
    ``j <= n``, value gain ``v_l`` at every key, own path and read pointing one way (``rho = 1``) and a linear
    MLP (``beta = 0``): the solvable model's recursion, over ``prompt_len`` P prompt and ``length`` T
    continuation positions. ``value_gain``, ``mlp_gain`` [L]; ``prompt_offsets`` [L, P], the input of layer
    ``l`` at each prompt position; ``coherence`` ``kappa``, a scalar or [L]."""
    value_gain, mlp_gain = np.asarray(value_gain, np.float64), np.asarray(mlp_gain, np.float64)
    prompt_offsets = np.asarray(prompt_offsets, np.float64)
    n_layers = len(value_gain)
    n = prompt_len + np.arange(1, length + 1)  # the continuation's queries, 1-based
    dilution = np.tril(np.ones((length, length))) / n[:, None]
    ones = np.ones(n_layers)
    return CalibratedRelay(
        prompt_len, prompt_read=value_gain[:, None] * prompt_offsets.sum(axis=1, keepdims=True) / n,
        relay_weights=value_gain[:, None, None] * dilution, coherence=np.broadcast_to(coherence, n_layers) * ones,
        cosine=ones, mlp_gain=mlp_gain, mlp_exponent=0 * ones, mlp_size=ones, value_gain=value_gain)


class _Readings(Probe):
    """Every block's attention output (``blocks``) and each head's attention weights, the mean of the pair's
    two runs (``attention`` [L, H, N, N]); ``hidden`` is the residual stream as usual."""

    def read_block(self, attn, mlp):
        return attn

    def read_attention(self, logits, weights, reads):
        return weights.mean(axis=0)


@functools.partial(jax.jit, static_argnums=(0, 3))
def _pair_readings(graphdef, state, tokens, prompt_len: int):
    """tokens int [2, N] (the pair's two runs) -> (prompt read [L, T], relay weights [L, T, T], value path's
    offset [L, N], attention offset [L, T], MLP input offset [L, T], offsets [L+1, N]), norms over the
    feature axis (module docstring)."""
    model = nnx.merge(graphdef, state)
    out = model(tokens, probe=_Readings())
    hidden, attn, weights = out.hidden, out.blocks, out.attention  # [L+1, 2, N, D], [L, 2, N, D], [L, H, N, N]
    cfg, p = model.config, prompt_len
    group = cfg.n_heads // cfg.kv_heads
    offsets = jnp.linalg.norm(hidden[:, 0] - hidden[:, 1], axis=-1)  # [L+1, N]
    prompt_read, relay_weights, value_out, attn_off, mlp_in = [], [], [], [], []
    for layer, block in enumerate(model.blocks):
        y = block.attention_input(hidden[layer])  # [2, N, D]
        dv = (y[0] - y[1]) @ block.attn.v.kernel[...]  # [N, kv * hd]: the biases cancel
        dv = jnp.repeat(dv.reshape(-1, cfg.kv_heads, cfg.head_dim), group, axis=1)  # [N, H, hd]
        per_head = jnp.einsum("nhk,hkd->hnd", dv, block.attn.o.kernel[...].reshape(cfg.n_heads, cfg.head_dim, -1))
        norms = jnp.linalg.norm(per_head, axis=-1)  # [H, N]: || U^h(j) ||
        w = weights[layer, :, p:]  # [H, T, N]: the continuation's queries
        before = offsets[layer, p:]
        gain = jnp.where(before > 0, norms[:, p:] / jnp.where(before > 0, before, 1.0), 0.0)  # [H, T]
        prompt_read.append(jnp.einsum("htj,hj->t", w[:, :, :p], norms[:, :p]))
        relay_weights.append(jnp.einsum("htu,hu->tu", w[:, :, p:], gain))
        value_out.append(jnp.linalg.norm(per_head.sum(axis=0), axis=-1))
        delta_attn = attn[layer, 0, p:] - attn[layer, 1, p:]
        attn_off.append(jnp.linalg.norm(delta_attn, axis=-1))
        mlp_in.append(jnp.linalg.norm(hidden[layer, 0, p:] - hidden[layer, 1, p:] + delta_attn, axis=-1))
    return (jnp.stack(prompt_read), jnp.stack(relay_weights), jnp.stack(value_out), jnp.stack(attn_off),
            jnp.stack(mlp_in), offsets)


def calibrate_relay(model: Transformer, prompts_a, prompts_b, continuations, *, progress: bool = False) -> CalibratedRelay:
    """Read the calibrated relay's inputs off ``model`` on prompt pairs (shapes as ``prompt_pair_offsets``;
    prompts of equal length P), one pair at a time (module docstring): the reads and gains per head and key
    (``prompt_read``, ``relay_weights``: the mean over pairs), the coherence, the cosine and the MLP's gain
    (medians, and the exponent's least squares, over positions and pairs), and the measured continuation
    offsets beside them. Offsets and gains in float64 from the model's dtype; the plain attention path (it
    reads the weights), so memory grows as ``L H N^2`` per pair. One pair gives that pair's own relay (a
    prediction per pair). ValueError for a model whose blocks are not pre-LN."""
    cfg = model.config
    if not cfg.layout.pre_ln:
        raise ValueError(f"the calibrated relay is stated for pre-LN blocks, this model has {cfg.layout}")
    a, b, c = check_pairs(cfg, prompts_a, prompts_b, continuations)
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"the relay compares prompts of equal length, got P_a={a.shape[1]} and P_b={b.shape[1]}")
    p = a.shape[1]
    graphdef, state = nnx.split(model)
    reads, coherence, cosine, mlp_in, mlp_out, value, offsets = [], [], [], [], [], [], []
    for i in tqdm(range(len(a)), desc="calibrated relay", unit="pair", disable=not progress):
        tokens = jnp.asarray(np.stack([np.concatenate([a[i], c[i]]), np.concatenate([b[i], c[i]])]))
        with jax.default_matmul_precision("highest"):
            source, weights, value_out, attn_off, into_mlp, off = (
                np.asarray(x, np.float64) for x in _pair_readings(graphdef, state, tokens, p))
        own = off[:-1, p:]  # [L, T]: the input of each layer at the continuation
        reads.append((source, weights))
        coherence.append(_ratios(attn_off, source + np.einsum("ltu,lu->lt", weights, own)))
        cosine.append(_ratios(into_mlp**2 - own**2 - attn_off**2, 2 * own * attn_off))
        mlp_in.append(into_mlp)
        mlp_out.append(off[1:, p:])
        value.append(_ratios(value_out, off[:-1]))
        offsets.append(off)
    gain, exponent, size = _mlp_gain(np.stack(mlp_in, axis=1), np.stack(mlp_out, axis=1))
    return CalibratedRelay(
        prompt_len=p, prompt_read=np.mean([s for s, _ in reads], axis=0),
        relay_weights=np.mean([w for _, w in reads], axis=0), coherence=_pooled_median(coherence),
        cosine=np.clip(_pooled_median(cosine), -1.0, 1.0), mlp_gain=gain, mlp_exponent=exponent, mlp_size=size,
        value_gain=_pooled_median(value), measured=np.mean(offsets, axis=0)[:, p:])


def _ratios(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """numerator / denominator, NaN where the denominator is 0 (no offset there to take a ratio of)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(denominator > 0, numerator / denominator, np.nan)


def _pooled_median(ratios: list[np.ndarray]) -> np.ndarray:
    """[pairs] of [L, N] -> [L]: the median over pairs and positions of every defined ratio (1 where a layer
    has none: nothing reached it to scale)."""
    stacked = np.stack(ratios, axis=1).reshape(len(ratios[0]), -1)
    return np.array([np.median(row[np.isfinite(row)]) if np.isfinite(row).any() else 1.0 for row in stacked])


def _mlp_gain(size: np.ndarray, out: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The MLP's gain as a power of the size of the offset it acts on, per layer: ``size``, ``out`` [L, pairs, T]
    its input and output offsets -> (m [L], beta [L], x* [L]): least squares of ``log(out / size)`` on
    ``log(size / x*)``, x* the median size, over the positions where both are > 0; m = 1, beta = 0 where a layer
    has none, beta = 0 where the sizes do not vary (nothing to fit a power on)."""
    gain, exponent, reference = np.ones(len(size)), np.zeros(len(size)), np.ones(len(size))
    for layer, (x, y) in enumerate(zip(size.reshape(len(size), -1), out.reshape(len(out), -1))):
        ok = (x > 0) & (y > 0)
        if not ok.any():
            continue
        reference[layer] = np.median(x[ok])
        log_x, log_gain = np.log(x[ok] / reference[layer]), np.log(y[ok] / x[ok])
        spread = log_x - log_x.mean()
        if np.ptp(log_x) > 0:
            exponent[layer] = float(spread @ (log_gain - log_gain.mean()) / (spread @ spread))
        gain[layer] = float(np.exp(log_gain.mean() - exponent[layer] * log_x.mean()))
    return gain, exponent, reference


__all__ = ["CalibratedRelay", "calibrate_relay", "dilution_relay"]
