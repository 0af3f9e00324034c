"""The no-hair bound on a real model: its conditions measured, its explicit form held against offsets.

docs/definitions.md#bound; the derivation is ``nohair_jax.theory.bound``
(``docs/bound.md``). One pre-LN
block satisfies

    delta_l(i) <= a_l delta_{l-1}(i) + (b_l / i) (P D_{l-1} + sum_{P < j <= i} delta_{l-1}(j))

with ``a_l``, ``b_l`` closed forms of what is measured here: the largest attention logit ``B_l``,
the floor ``sigma_min`` of every norm's input scale, the norms' gains and biases, the operator
norms of the weights, and the prompt offsets ``D_l``. Unrolled (``nohair_jax.relay.offsets`` with
``residual=a, direct=relay=b``) it bounds the offset at every layer and continuation position;
``C_l P (log t)^(l-1) / t`` bounds it for ``t >= t_0 = max(P, 3)``.

Two checks against measured offsets ``d_l(t)`` (``prompt_pair_offsets``):

* shape: the log-log slope of ``d_l(t) / s_l(t)`` over ``t`` in ``[T/16, T]`` (mean over pairs,
  bootstrap interval over pairs) must be at most zero within the interval, where ``s_l`` is the
  solvable relay model's ``delta_l`` (``relay.offsets`` with its defaults). ``s_l`` is
  ``Theta(P (log t)^(l-1) / t)``, so a bounded ratio to one is a bounded ratio to the other, but
  ``s_l`` also carries the finite-``t`` corrections: the ratio of ``s_l`` itself to
  ``P (log t)^(l-1) / t`` still rises at any reachable ``t`` (it tends to ``1/(l-1)!`` from below),
  so that literal ratio's slope is reported too, for information, not as the test.
* explicit: the max over pairs of ``d_l(t)`` never exceeds the bound, at any layer and ``t``;
  the margin (bound / measured, minimum over ``t``) says by how much it holds.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from matplotlib.figure import Figure

from nohair_jax import relay
from nohair_jax.fit import fit_power_law, summary_curve
from nohair_jax.model import Transformer
from nohair_jax.offsets import check_pairs, map_pairs, prompt_pair_offsets
from nohair_jax.pairs import PromptPairs
from nohair_jax.results import load_json, save_figure, save_json, save_npz, written_together
from nohair_jax.theory import bound as theory

__all__ = [
    "BoundConditions",
    "BoundNotApplicable",
    "check_bound",
    "coefficients",
    "draw_bound",
    "explicit_bounds",
    "explicit_check",
    "measure_conditions",
    "report",
    "shape_check",
]

ATTENTION_WEIGHTS = ("q", "k", "v", "o")
MLP_WEIGHTS = ("up", "gate", "down")


class BoundNotApplicable(ValueError):
    """The explicit bound is not derived for this model (``BoundConditions.not_derived``, infinite constants)."""


@dataclasses.dataclass(frozen=True)
class BoundConditions:
    """What the bound is stated in, measured on one model and one set of prompt pairs.

    Norms are listed in forward order: (attention, MLP) per block, then the final norm if any;
    only the block norms enter the bound (``h_L`` is taken before the final norm).

    logit_bound:    [L] ``B_l``, the largest ``|q.k| / sqrt(d_head)`` over heads, causal pairs,
                    pairs and both runs (before any prompt logit bias).
    sigma_min:      [n_norms] smallest input scale of each norm (std for LayerNorm, rms for
                    RMSNorm, eps excluded; units of h) over positions, pairs and both runs.
    gain:           [n_norms] largest ``|scale|`` of each norm.
    norm_bias:      [n_norms] Euclidean norm of each norm's bias (0 without one).
    weight_norms:   name -> [L] spectral norms (largest singular values, float64) of the kernels
                    q, k, v, o, up, gate, down (k, v over the kv heads; gate 0 unless swiglu).
    bias_norms:     name -> [L] Euclidean norms of the q, k, up, gate biases (0 without one).
    prompt_offsets: [L+1] ``D_l``, max over prompt positions and pairs of ``||h_l(a)[j] - h_l(b)[j]||``.
    alibi, sliding_window, qk_norm: the architecture contrasts (docs/contrasts.md) the model has;
                    ``sliding_window`` only where it is shorter than the pairs' sequences.
    """

    prompt_len: int
    norm_placement: str
    mlp: str
    prompt_logit_bias: bool
    norm_eps: float
    d_model: int
    head_dim: int
    group: int
    logit_bound: np.ndarray
    sigma_min: np.ndarray
    gain: np.ndarray
    norm_bias: np.ndarray
    weight_norms: dict[str, np.ndarray]
    bias_norms: dict[str, np.ndarray]
    prompt_offsets: np.ndarray
    alibi: bool = False
    sliding_window: int | None = None
    qk_norm: bool = False

    @property
    def n_layers(self) -> int:
        return len(self.logit_bound)

    @property
    def floor(self) -> float:
        """The threshold a norm's input scale must stay above: ``sqrt(norm_eps)``. Below it the eps
        in the norm's denominator dominates: the norm no longer normalises, its input is near zero."""
        return math.sqrt(self.norm_eps)

    def _architecture(self) -> list[tuple[str, bool]]:
        """(reason, whether it breaks a condition of the theorem) for each part of the architecture
        the explicit bound is not derived for."""
        reasons = []
        if self.norm_placement != "pre":
            reasons.append((f"not pre-LN (norm_placement={self.norm_placement!r}): the bound is derived for blocks "
                            "x + Attn(N(x)), x' + MLP(N(x')); post-LN normalises the residual stream itself", True))
        if self.prompt_logit_bias:
            reasons.append(("prompt logit bias: gamma log(i/P) is added to the prompt logits, which are then not "
                            "bounded uniformly in i, so no weight is bounded by e^(2B)/i", True))
        if self.alibi:
            reasons.append(("ALiBi: -m_h (i - j) is added to the logits, which are then not bounded uniformly in i; "
                            "a key's weight falls off exponentially in i - j, not as e^(2B)/i", True))
        if self.sliding_window is not None:
            reasons.append((f"sliding window of {self.sliding_window}: the bound's weights e^(2B)/i are derived for "
                            "attention over every earlier key; in a window they are about 1/window", True))
        if self.qk_norm:
            reasons.append(("QK-norm: the logits are bounded by construction, but the explicit constants are "
                            "derived for logits linear in the normalised input (w_q, w_k), not normalised again", False))
        return reasons

    def not_derived(self) -> list[str]:
        """Why the explicit bound's constants are not derived for this model; empty when they are."""
        return [reason for reason, _ in self._architecture()]

    def failures(self) -> list[str]:
        """One sentence per condition of the theorem that fails; empty when all hold."""
        reasons = [reason for reason, breaks in self._architecture() if breaks]
        for layer, value in enumerate(self.logit_bound, start=1):
            if not np.isfinite(value):
                reasons.append(f"layer {layer}: the largest |logit| is {value}, not finite")
        for k, value in enumerate(self.sigma_min[: 2 * self.n_layers]):
            if not value > self.floor:
                reasons.append(f"{_norm_name(k)} norm: input scale floor sigma_min = {value:.3g} is not above "
                               f"sqrt(eps) = {self.floor:.3g}")
        return reasons

    def block_values(self) -> dict[str, np.ndarray]:
        """Per-layer values ``[L]`` of every symbol of ``theory.bound.BLOCK_SYMBOLS``."""
        attn, mlp = slice(0, 2 * self.n_layers, 2), slice(1, 2 * self.n_layers, 2)
        w, bias = self.weight_norms, self.bias_norms
        return dict(
            B=self.logit_bound, sigma_attn=self.sigma_min[attn], sigma_mlp=self.sigma_min[mlp],
            g_attn=self.gain[attn], g_mlp=self.gain[mlp], beta_attn=self.norm_bias[attn], beta_mlp=self.norm_bias[mlp],
            d=self.d_model, d_head=self.head_dim, G=self.group, w_q=w["q"], w_k=w["k"], w_v=w["v"], w_o=w["o"],
            b_q=bias["q"], b_k=bias["k"], w_up=w["up"], w_gate=w["gate"], w_down=w["down"], b_up=bias["up"],
            b_gate=bias["gate"],
        )

    def to_dict(self) -> dict:
        """Plain data for JSON, with the failures and the floor."""
        return {**dataclasses.asdict(self), "floor": self.floor, "failures": self.failures()}


def _norm_name(k: int) -> str:
    layer, part = divmod(k, 2)
    return f"layer {layer + 1} {('attention', 'MLP')[part]}"


def _pair_conditions(model: Transformer, a: jax.Array, b: jax.Array, c: jax.Array):
    """Traceable per-pair core: int [k, P], [k, P], [k, T] -> the residual streams at the prompt's
    positions [k, L+1, 2, P, D] (runs a+c, b+c), the smallest input scale of every norm over both
    runs and all positions [k, n_norms], the largest |attention logit| per layer [k, L]."""
    k, prompt_len = a.shape
    out = model(jnp.concatenate([jnp.concatenate([a, c], 1), jnp.concatenate([b, c], 1)]), diagnostics=True)
    # [n, 2k, ...] (runs a+c of every pair, then b+c) -> [k, n, 2, ...]
    per_pair = lambda x: jnp.moveaxis(x.reshape(x.shape[0], 2, k, *x.shape[2:]), 2, 0)  # noqa: E731
    return (per_pair(out.hidden[:, :, :prompt_len]), per_pair(out.diagnostics.norm_scale).min(axis=(2, 3)),
            per_pair(out.diagnostics.max_abs_logit).max(axis=2))


def _spectral(param) -> float:
    """Largest singular value of a kernel, in float64: the square root of the largest eigenvalue of
    the smaller Gram matrix. Equal to ``np.linalg.norm(W, 2)`` to rounding (the tests hold it against
    ``np.linalg.svd``) and many times faster where LAPACK's SVD of a wide matrix crawls on a busy CPU."""
    w = np.asarray(param[...], np.float64)
    gram = w @ w.T if w.shape[0] <= w.shape[1] else w.T @ w
    return float(np.sqrt(max(np.linalg.eigvalsh(gram)[-1], 0.0)))


def _length(param) -> float:
    return 0.0 if param is None else float(np.linalg.norm(np.asarray(param[...], np.float64)))


def measure_conditions(model: Transformer, prompts_a, prompts_b, continuations) -> BoundConditions:
    """Measure the bound's conditions on ``model`` with prompt pairs (shapes as ``prompt_pair_offsets``).

    Runs ``a+c`` and ``b+c`` of each pair with the model's diagnostics through ``offsets.map_pairs``
    (one compiled call per pair, full matmul precision); weights are read in float64. Prompts must
    have equal length ``P``.
    """
    cfg = model.config
    a, b, c = check_pairs(cfg, prompts_a, prompts_b, continuations)
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"the bound compares prompts of equal length, got P_a={a.shape[1]} and P_b={b.shape[1]}")
    prompt_len = a.shape[1]
    hidden, scales, logits = map_pairs(_pair_conditions, model, a, b, c)
    hidden = hidden.astype(np.float64)  # [n, L+1, 2, P, D]: the prompt offsets in float64
    offsets = np.linalg.norm(hidden[:, :, 0] - hidden[:, :, 1], axis=-1).max(axis=-1)  # [n, L+1]

    blocks = list(model.blocks)
    norms = [n for blk in blocks for n in (blk.attn_norm, blk.mlp_norm)]
    if model.final_norm is not None:
        norms.append(model.final_norm)
    linear = {name: [getattr(blk.attn, name) for blk in blocks] for name in ATTENTION_WEIGHTS}
    linear.update({name: [getattr(blk.mlp, name) for blk in blocks] for name in MLP_WEIGHTS})
    return BoundConditions(
        prompt_len=prompt_len,
        norm_placement=cfg.norm_placement,
        mlp=cfg.mlp,
        prompt_logit_bias=cfg.prompt_logit_bias is not None,
        norm_eps=float(cfg.norm_eps),
        d_model=cfg.d_model,
        head_dim=cfg.head_dim,
        group=cfg.n_heads // cfg.kv_heads,
        logit_bound=np.max(logits, axis=0).astype(np.float64),
        sigma_min=np.min(scales, axis=0).astype(np.float64),
        gain=np.array([np.abs(np.asarray(n.scale[...], np.float64)).max() for n in norms]),
        norm_bias=np.array([_length(n.bias) for n in norms]),
        weight_norms={name: np.array([0.0 if m is None else _spectral(m.kernel) for m in mods])
                      for name, mods in linear.items()},
        bias_norms={name: np.array([0.0 if m is None else _length(m.bias) for m in linear[name]])
                    for name in ("q", "k", "up", "gate")},
        prompt_offsets=np.max(offsets, axis=0),
        alibi=cfg.position == "alibi",
        sliding_window=cfg.sliding_window if (cfg.sliding_window or math.inf) < prompt_len + c.shape[1] else None,
        qk_norm=cfg.qk_norm,
    )


def coefficients(cond: BoundConditions) -> tuple[np.ndarray, np.ndarray]:
    """Block coefficients ``a [L]``, ``b [L]`` (dimensionless) from the measured conditions.

    Raises ``BoundNotApplicable`` where the derivation does not cover the model (``not_derived``:
    post-LN, a prompt logit bias, ALiBi, a sliding window, QK-norm) or a constant is infinite (an infinite logit, a norm input of scale exactly 0).
    A floor below ``sqrt(eps)`` is reported by ``failures()`` but still gives a (huge) valid bound.
    """
    if cond.not_derived():
        raise BoundNotApplicable("; ".join(cond.not_derived()))
    a, b = theory.block_coefficients(cond.mlp, **cond.block_values())
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise BoundNotApplicable(f"infinite block coefficients (a = {a}, b = {b}): {'; '.join(cond.failures())}")
    return a, b


def explicit_bounds(cond: BoundConditions, length: int) -> dict[str, np.ndarray | int]:
    """The explicit bound at continuation positions ``t = 1..length``, in the units of h.

    Returns ``a``, ``b`` [L]; ``C`` [L] (``C_l``); ``t0`` (the closed form's first position);
    ``recursion`` [L+1, T], the block recursion unrolled with the measured ``D_0..D_{L-1}``
    (valid at every ``t``); ``closed`` [L+1, T], ``C_l P (log t)^(l-1) / t`` (nan for ``t < t0``).
    """
    a, b = coefficients(cond)
    prompt_len, depth = cond.prompt_len, cond.n_layers
    prompt = cond.prompt_offsets[:-1]
    recursion = np.asarray(relay.offsets(prompt_len, length, depth, residual=a, direct=b, relay=b, prompt_offset=prompt))
    constant = theory.explicit_constant(a, b, prompt, prompt_len)
    t0 = theory.explicit_threshold(prompt_len)
    t = np.arange(1, length + 1, dtype=np.float64)
    layer = np.arange(1, depth + 1)[:, None]
    closed = np.full((depth + 1, length), np.nan)
    closed[0] = 0.0
    # C_l beyond float64 (real models: e^(2B) with B in the tens) gives inf, as it should: no warning
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        closed[1:] = np.where(t >= t0, constant[:, None] * prompt_len * np.log(t) ** (layer - 1) / t, np.nan)
    return dict(a=a, b=b, C=constant, t0=t0, recursion=recursion, closed=closed)


def shape_check(t, l2, prompt_len: int, *, n_boot: int = 1000, seed: int = 0) -> list[dict]:
    """Check (a): does ``d_l(t)`` decay at least like the bound's shape over the upper range of ``t``?

    t: [T] positions 1..T; l2: [n_pairs, L+1, T] offsets. For each layer 1..L the ratio of the
    offsets to the relay model's ``delta_l`` (``relay.offsets(P, T, L)``) is fitted over
    ``[max(2, T // 16), T]`` (``fit_power_law``, mean over pairs, bootstrap over pairs):
    ``slope`` and ``interval`` are its log-log slope and interval; ``passes`` when the interval
    reaches down to zero or below (the slope itself when there is no interval, None). ``slope_log_shape``, ``interval_log_shape``: the same for the
    ratio to ``P (log t)^(l-1) / t`` (information only; see the module docstring).
    ``relay_prefactor``: the factor that best lays the relay shape on the mean curve in the window
    (least squares in log space). A layer that cannot be fitted gets ``{"layer", "error"}``.
    """
    length, depth = l2.shape[-1], l2.shape[1] - 1
    t_min = max(2, length // 16)
    window = np.asarray(t) >= t_min
    t = np.asarray(t, np.float64)[window]  # from here on only the window (log t = 0 at t = 1)
    shape = np.asarray(relay.offsets(prompt_len, length, depth))[:, window]
    results = []
    for layer in range(1, depth + 1):
        measured = np.asarray(l2, np.float64)[:, layer, window]
        entry = {"layer": layer, "window": [t_min, length]}
        try:
            for suffix, reference in (("", shape[layer]), ("_log_shape", prompt_len * np.log(t) ** (layer - 1) / t)):
                fit = fit_power_law(t, measured / reference, t_min=t_min, n_boot=n_boot, seed=seed)
                entry["slope" + suffix] = -fit.alpha
                entry["interval" + suffix] = None if fit.ci is None else [-fit.ci[1], -fit.ci[0]]
        except ValueError as err:  # offsets not positive in the window, too short a window
            results.append({"layer": layer, "error": str(err)})
            continue
        entry["relay_prefactor"] = float(np.exp(np.mean(np.log(summary_curve(measured) / shape[layer]))))
        # Without a bootstrap (one pair, n_boot = 0) there is no interval: judge the point estimate.
        entry["passes"] = bool((entry["slope"] if entry["interval"] is None else entry["interval"][0]) <= 0.0)
        results.append(entry)
    return results


def explicit_check(l2, recursion, closed) -> list[dict]:
    """Check (b): the max over pairs of the offsets against the explicit bounds, per layer 1..L.

    l2: [n_pairs, L+1, T]; recursion, closed: [L+1, T] (closed nan where it does not apply).
    ``margin`` = min over t of bound / measured (inf where every offset is 0 or no t is covered) and
    ``t_margin`` where it is attained (None if nowhere); ``holds`` = measured <= bound at every t.
    The same with ``_closed`` for the closed form, where it applies (``t >= t0``).
    """
    worst = np.asarray(l2, np.float64).max(axis=0)
    results = []
    for layer in range(1, worst.shape[0]):
        entry = {"layer": layer}
        for suffix, bound in (("", recursion[layer]), ("_closed", closed[layer])):
            covered = np.flatnonzero(np.isfinite(bound))
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.where(worst[layer][covered] > 0, bound[covered] / worst[layer][covered], np.inf)
            k = int(np.argmin(ratio)) if ratio.size else None
            entry["margin" + suffix] = float(ratio[k]) if ratio.size else math.inf
            entry["t_margin" + suffix] = None if k is None or not np.isfinite(ratio[k]) else int(covered[k] + 1)
            entry["holds" + suffix] = bool((worst[layer][covered] <= bound[covered]).all())
        results.append(entry)
    return results


def check_bound(
    model: Transformer,
    pairs: PromptPairs,
    out_dir: str | Path,
    *,
    n_boot: int = 1000,
    seed: int = 0,
    meta: dict | None = None,
    progress: bool = True,
) -> dict:
    """Measure offsets and conditions, run both checks, save and draw; returns ``bound.json``'s contents.

    Writes into ``out_dir``: ``bound.npz`` (t, l2 [n_pairs, L+1, T], relay_shape [L+1, T] and,
    where the bound applies, recursion and closed [L+1, T]), ``bound.json`` (model config,
    conditions, coefficients, both checks, ``meta``) and ``bound.png``. ``explicit`` is
    ``{"error": reason}`` where the bound does not apply.
    """
    out_dir = Path(out_dir)
    off = prompt_pair_offsets(model, *pairs, progress=progress)
    cond = measure_conditions(model, *pairs)
    length, depth = off.l2.shape[-1], off.l2.shape[1] - 1
    arrays = dict(t=off.t, l2=off.l2, relay_shape=np.asarray(relay.offsets(off.prompt_len, length, depth)))
    summary = {
        "model": model.config.to_dict(),
        "n_pairs": int(off.l2.shape[0]),
        "prompt_len": off.prompt_len,
        "length": length,
        "meta": meta or {},
        "conditions": cond.to_dict(),
        "shape": shape_check(off.t, off.l2, off.prompt_len, n_boot=n_boot, seed=seed),
    }
    try:
        bounds = explicit_bounds(cond, length)
    except BoundNotApplicable as err:
        summary["explicit"] = {"error": str(err)}
    else:
        summary["coefficients"] = {key: bounds[key] for key in ("a", "b", "C", "t0")}
        summary["explicit"] = explicit_check(off.l2, bounds["recursion"], bounds["closed"])
        arrays.update(recursion=bounds["recursion"], closed=bounds["closed"])
    with written_together():
        save_npz(out_dir / "bound.npz", **arrays)
        save_json(out_dir / "bound.json", summary)
    draw_bound(out_dir)
    return load_json(out_dir / "bound.json")


def check_row(checked: dict) -> dict:
    """What the claims read of a ``check_bound`` summary: the failed conditions, the largest logit
    per layer, the smallest block-norm sigma_min over sqrt(eps), both checks."""
    cond, depth = checked["conditions"], checked["model"]["n_layers"]
    return dict(depth=depth, failures=cond["failures"], logit_bound=cond["logit_bound"],
                sigma_min_over_floor=min(cond["sigma_min"][: 2 * depth]) / cond["floor"],
                explicit=checked["explicit"], shape=checked["shape"])


def report(summary: dict) -> str:
    """The conditions and both checks of a ``bound.json`` as a readable table."""
    cond = summary["conditions"]
    depth = len(cond["logit_bound"])
    fmt = lambda values: " ".join(_number(v) for v in values)  # noqa: E731
    lines = [
        "conditions of the theorem (pre-LN, bounded logits, norm inputs away from zero):",
        f"  pre-LN: {cond['norm_placement'] == 'pre'}    prompt logit bias: {cond['prompt_logit_bias']}    mlp: {cond['mlp']}",
        f"  B_l (largest |logit|), layers 1..{depth}: {fmt(cond['logit_bound'])}",
        f"  sigma_min (attention, MLP norm per layer; floor sqrt(eps) = {cond['floor']:.3g}): "
        + "; ".join(f"{a:.3g}, {m:.3g}" for a, m in zip(cond["sigma_min"][0:2 * depth:2], cond["sigma_min"][1:2 * depth:2])),
        f"  D_l (prompt offsets), layers 0..{depth}: {fmt(cond['prompt_offsets'])}",
        "  all conditions hold" if not cond["failures"] else "  FAILS: " + "\n         ".join(cond["failures"]),
    ]
    explicit = summary["explicit"]
    if "coefficients" in summary:
        co = summary["coefficients"]
        lines += [f"block coefficients a_l: {fmt(co['a'])}", f"                   b_l: {fmt(co['b'])}",
                  f"closed-form constants C_l (t >= t0 = {co['t0']}): {fmt(co['C'])}"]
    lines += ["", f"{'layer':>5}  {'shape: slope vs relay [interval]':>34}  {'ok':>3}  {'vs P(log t)^(l-1)/t':>20}  "
              f"{'explicit margin':>15}  {'closed margin':>13}  holds"]
    for layer in range(1, depth + 1):
        shape = summary["shape"][layer - 1]
        if "error" in shape:
            left = f"{'no fit: ' + shape['error'][:60]:>63}"
        else:
            lo, hi = (_number(v, "+7.3f") for v in shape["interval"] or (None, None))
            left = (f"{shape['slope']:+8.3f} [{lo:>7}, {hi:>7}]{'':>9}  {'yes' if shape['passes'] else 'NO':>3}  "
                    f"{shape['slope_log_shape']:+20.3f}")
        if "error" in explicit:
            right = "not applicable"
        else:
            e = explicit[layer - 1]
            holds = "yes" if e["holds"] and e["holds_closed"] else "VIOLATED"
            right = f"{_number(e['margin']):>15}  {_number(e['margin_closed']):>13}  {holds}"
        lines.append(f"{layer:>5}  {left}  {right}")
    if "error" in explicit:
        lines.append(f"explicit bound not applicable: {explicit['error']}")
    return "\n".join(lines)


def _number(value, spec=".3g") -> str:
    """A JSON number for a table; None is what JSON keeps of inf and nan (an all-zero offset curve)."""
    return "-" if value is None else format(value, spec)


def bound_figure(t, l2, relay_shape, summary: dict, recursion=None, closed=None) -> Figure:
    """One log-log panel per layer: measured offsets (mean and max over pairs), the relay model's shape
    with its fitted prefactor, the explicit bound (recursion and closed form). Arrays as in ``bound.npz``."""
    depth = l2.shape[1] - 1
    cols = min(depth, 3)
    rows = -(-depth // cols)
    fig = Figure(figsize=(5 * cols, 3.8 * rows))
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False).ravel())
    for layer, ax in enumerate(axes[:depth], start=1):
        positive = (l2[:, layer] > 0).all(axis=0)
        ax.loglog(t[positive], summary_curve(l2[:, layer])[positive], color="C0", label="measured, mean over pairs")
        ax.loglog(t[positive], l2[:, layer].max(axis=0)[positive], color="C0", lw=0.7, alpha=0.6, label="measured, max")
        shape = summary["shape"][layer - 1]
        if "relay_prefactor" in shape:
            ax.loglog(t, shape["relay_prefactor"] * relay_shape[layer], "k--", lw=1, label="relay model, fitted prefactor")
        title = f"layer {layer}"
        if recursion is not None:
            ax.loglog(t, recursion[layer], color="C3", label="explicit bound (recursion)")
            ax.loglog(t, closed[layer], color="C3", ls=":", label="C_l P (log t)^(l-1) / t")
            title += f": bound / measured >= {_number(summary['explicit'][layer - 1]['margin'])}"
        ax.set(title=title, xlabel="continuation position t", ylabel="offset ||h_a - h_b||")
    for ax in axes[depth:]:
        ax.set_visible(False)
    axes[0].legend(fontsize=7)
    cfg = summary["model"]
    fig.suptitle(f"{cfg['n_layers']} layers, d_model {cfg['d_model']}, P = {summary['prompt_len']}, "
                 f"{summary['n_pairs']} pairs" + ("" if recursion is not None else "; explicit bound not applicable"))
    fig.tight_layout()
    return fig


def draw_bound(out_dir: str | Path) -> Path:
    """Draw ``bound.png`` from ``bound.npz`` and ``bound.json`` in ``out_dir``."""
    out_dir = Path(out_dir)
    summary = load_json(out_dir / "bound.json")
    with np.load(out_dir / "bound.npz") as data:
        bounds = (data["recursion"], data["closed"]) if "recursion" in data else (None, None)
        fig = bound_figure(data["t"], data["l2"], data["relay_shape"], summary, *bounds)
    return save_figure(out_dir / "bound.png", fig)
