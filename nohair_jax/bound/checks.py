"""Two checks of the no-hair bound against measured offsets ``d_l(t)`` (``prompt_pair_offsets``).

* shape: the log-log slope of ``d_l(t) / s_l(t)`` over ``t`` in ``[T/16, T]`` (mean over pairs,
  t-interval over pairs, ``fit.t_interval``) must be at most zero within the interval, where ``s_l`` is the
  solvable relay model's ``delta_l`` (``relay.offsets`` with its defaults). ``s_l`` is
  ``Theta(P (log t)^(l-1) / t)``, so a bounded ratio to one is a bounded ratio to the other, but
  ``s_l`` also carries the finite-``t`` corrections: the ratio of ``s_l`` itself to
  ``P (log t)^(l-1) / t`` still rises at any reachable ``t`` (it tends to ``1/(l-1)!`` from below),
  so that literal ratio's slope is reported too, for information, not as the test.
* explicit: the max over pairs of ``d_l(t)`` never exceeds the bound (``conditions.explicit_bounds``),
  at any layer and ``t``; the margin (bound / measured, minimum over ``t``) says by how much it holds.

``check_bound`` runs both on a model and writes ``bound.npz``, ``bound.json`` and ``bound.png``.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from nohair_jax import relay
from nohair_jax.bound.conditions import BoundNotApplicable, explicit_bounds, measure_conditions
from nohair_jax.bound.records import BoundRow, ExplicitCheck, NotApplicable, ShapeCheck
from nohair_jax.bound.render import bound_set_figure
from nohair_jax.checks import real_array
from nohair_jax.fit import FitRefused, fit_or_refuse, summary_curve
from nohair_jax.model import Transformer
from nohair_jax.offsets import prompt_pair_offsets
from nohair_jax.pairs import PromptPairs
from nohair_jax.results import jsonable, load_json, save_figure, save_json, save_npz, written_together

def shape_check(t, l2, prompt_len: int, *, n_boot: int = 1000, seed: int = 0) -> list[ShapeCheck | FitRefused]:
    """Check (a): does ``d_l(t)`` decay at least like the bound's shape over the upper range of ``t``?

    t: [T] positions 1..T; l2: [n_pairs, L+1, T] offsets. For each layer 1..L the ratio of the
    offsets to the relay model's ``delta_l`` (``relay.offsets(P, T, L)``) is fitted over
    ``[max(2, T // 16), T]`` (``fit_power_law``, mean over pairs, bootstrap over pairs), one
    ``ShapeCheck`` per layer: ``slope`` and ``interval`` are its log-log slope and interval;
    ``passes`` when the interval reaches down to zero or below (the slope itself when there is no
    interval). ``slope_log_shape``, ``interval_log_shape``: the same for the ratio to
    ``P (log t)^(l-1) / t`` (information only; see the module docstring). ``relay_prefactor``: the
    factor that best lays the relay shape on the mean curve in the window (least squares in log
    space). A layer that cannot be fitted is a ``FitRefused``.
    """
    l2 = _offsets("l2", l2)
    length, depth = l2.shape[-1], l2.shape[1] - 1
    t = real_array("t", t)
    if t.shape != (length,) or not np.array_equal(t, np.arange(1, length + 1)):
        raise ValueError(f"t must be the positions 1..T = 1..{length} of l2, got shape {t.shape}")
    t_min = max(2, length // 16)
    window = np.asarray(t) >= t_min
    t = np.asarray(t, np.float64)[window]  # from here on only the window (log t = 0 at t = 1)
    shape = np.asarray(relay.offsets(prompt_len, length, depth))[:, window]
    results = []
    for layer in range(1, depth + 1):
        measured = np.asarray(l2, np.float64)[:, layer, window]
        fits = [fit_or_refuse(t, measured / reference, t_min=t_min, n_boot=n_boot, seed=seed)
                for reference in (shape[layer], prompt_len * np.log(t) ** (layer - 1) / t)]
        refused = next((f for f in fits if isinstance(f, FitRefused)), None)
        if refused is not None:  # offsets not positive in the window, too short a window
            results.append(refused)
            continue
        (slope, interval), (slope_log, interval_log) = ((-f.alpha, None if f.ci is None else (-f.ci[1], -f.ci[0]))
                                                        for f in fits)
        results.append(ShapeCheck(
            layer=layer, window=(t_min, length), slope=slope, interval=interval, slope_log_shape=slope_log,
            interval_log_shape=interval_log,
            relay_prefactor=float(np.exp(np.mean(np.log(summary_curve(measured) / shape[layer])))),
            # Without a bootstrap (one pair, n_boot = 0) there is no interval: judge the point estimate.
            passes=bool((slope if interval is None else interval[0]) <= 0.0), dof=fits[0].dof))
    return results


def explicit_check(l2, recursion, closed) -> list[ExplicitCheck]:
    """Check (b): the max over pairs of the offsets against the explicit bounds, per layer 1..L.

    l2: [n_pairs, L+1, T]; recursion, closed: [L+1, T] (closed nan where it does not apply).
    ``margin`` = min over t of bound / measured (inf where every offset is 0 or no t is covered) and
    ``t_margin`` where it is attained (None if nowhere); ``holds`` = measured <= bound at every t.
    The same with ``_closed`` for the closed form, where it applies (``t >= t0``).
    """
    l2 = _offsets("l2", l2)
    if not np.isfinite(l2).all():
        raise ValueError("l2 holds non-finite offsets")
    recursion, closed = (real_array(name, x).astype(np.float64) for name, x in (("recursion", recursion), ("closed", closed)))
    for name, x in (("recursion", recursion), ("closed", closed)):
        if x.shape != l2.shape[1:]:
            raise ValueError(f"{name} must have shape [L+1, T] = {l2.shape[1:]} (as l2), got shape {x.shape}")
    worst = l2.max(axis=0)
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
        results.append(ExplicitCheck(**entry))
    return results


def explicit_result(cond, l2, length: int) -> tuple[dict | None, list[ExplicitCheck] | NotApplicable]:
    """The explicit bound where its derivation applies to the model: (``explicit_bounds``' coefficients and
    curves, ``explicit_check`` of ``l2`` [n_pairs, L+1, T] against them), else (None, ``NotApplicable``
    saying why)."""
    try:
        bounds = explicit_bounds(cond, length)
    except BoundNotApplicable as err:
        return None, NotApplicable(str(err))
    return bounds, explicit_check(l2, bounds["recursion"], bounds["closed"])


def _offsets(name: str, l2) -> np.ndarray:
    """Offsets ``[n_pairs, L+1, T]`` (n_pairs, L, T >= 1) as float64, or ValueError/TypeError naming them."""
    l2 = real_array(name, l2).astype(np.float64)
    if l2.ndim != 3 or l2.shape[0] < 1 or l2.shape[1] < 2 or l2.shape[2] < 1:
        raise ValueError(f"{name} must have shape [n_pairs, L+1, T] with n_pairs, L, T >= 1, got shape {l2.shape}")
    return l2


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
    """Measure offsets and conditions of ``model`` on ``pairs`` (``PromptPairs``), run both checks,
    save and draw; returns ``bound.json``'s contents. ``n_boot`` and ``seed``: the shape check's
    bootstrap; ``progress``: a progress bar over pairs.

    Writes into ``out_dir``: ``bound.npz`` (t, l2 [n_pairs, L+1, T], relay_shape [L+1, T] and,
    where the bound applies, recursion and closed [L+1, T]), ``bound.json`` (model config,
    conditions, coefficients, both checks, ``meta``) and ``bound.png``; read its records back with
    ``records.shape_from_dict`` and ``records.explicit_from_saved`` (``NotApplicable`` where the
    bound does not apply).
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
        "shape": [e.to_dict() for e in shape_check(off.t, off.l2, off.prompt_len, n_boot=n_boot, seed=seed)],
    }
    bounds, explicit = explicit_result(cond, off.l2, length)
    if bounds is None:
        summary["explicit"] = explicit.to_dict()
    else:
        summary["coefficients"] = {key: bounds[key] for key in ("a", "b", "C", "t0")}
        summary["explicit"] = [e.to_dict() for e in explicit]
        arrays.update(recursion=bounds["recursion"], closed=bounds["closed"])
    with written_together():  # data, summary and figure replace an earlier set together, or none does
        save_npz(out_dir / "bound.npz", **arrays)
        save_json(out_dir / "bound.json", summary)
        save_figure(out_dir / "bound.png", bound_set_figure(arrays, jsonable(summary)))
    return load_json(out_dir / "bound.json")


def check_row(checked: dict) -> BoundRow:
    """A ``BoundRow`` of a ``check_bound`` summary."""
    cond, depth = checked["conditions"], checked["model"]["n_layers"]
    return BoundRow(depth=depth, failures=cond["failures"], logit_bound=cond["logit_bound"],
                sigma_min_over_floor=min(cond["sigma_min"][: len(cond["block_norms"]) * depth]) / cond["floor"],
                explicit=checked["explicit"], shape=checked["shape"])
