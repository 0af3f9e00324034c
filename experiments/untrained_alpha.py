"""Alpha per layer of untrained (random init) models at several depths.

The paper reports alpha ~ 0.2 to 0.5 for untrained models. This measures it for the project's
default architecture (pre-LN, learned positions, d_model 128) at depths 1, 2, 4 and 6, with the
fit window, the interval and the float32 noise floor of ``nohair offsets``.

    python experiments/untrained_alpha.py --out results/untrained_alpha            # quick: T 2048, 16 pairs
    python experiments/untrained_alpha.py --profile full --out results/untrained_alpha  # GPU-sized

Writes ``<out>/depth_<L>/{offsets.npz, fit.json, offsets.png}``, ``<out>/summary.json``,
``<out>/alpha_vs_layer.png`` and ``<out>/power_law.png`` (each depth's last layer against a power
law at the claim's tolerances), both drawn from summary.json.
"""

from __future__ import annotations

from pathlib import Path
from typing import NotRequired, TypedDict

from matplotlib.figure import Figure

import numpy as np

import nohair_jax as nh
from nohair_jax import criteria
from nohair_jax.parts import Part
from nohair_jax.claims import NOT_MEASURED, Claim, Judgement, PartSummary, Record
from nohair_jax.fit import FitRefused, PowerLawFit, PowerLawTolerance, alphas, fit_from_dict, log_binned
from nohair_jax.experiments import experiment_parser, parse_experiment_args, relay_alphas, untrained_model_and_pairs, write_summary
from nohair_jax.results import load_json, save_figure

POWER_LAW_TOLERANCE = 0.10  # "approximately a power law": largest |log residual| at most 0.10 (about 10 %)
POWER_LAW_TOLERANCES = (0.05, 0.10, 0.20)  # the verdict at each, so a reader sees how it depends on the tolerance
MIN_DECADES = 1.5  # a power law is only judged over a window of at least this many decades of t
UNTRAINED_RANGE = criteria.UNTRAINED_RANGE
PROFILES = {
    "smoke": dict(depths=(1, 2), d_model=32, prompt_len=4, length=128, n_pairs=2),
    "quick": dict(depths=(1, 2, 4, 6), d_model=128, prompt_len=16, length=2048, n_pairs=16),
    "full": dict(depths=(1, 2, 4, 6, 8, 12), d_model=256, prompt_len=16, length=8192, n_pairs=64),
}

PART = Part(order=3, title="Untrained models: alpha per layer", figures=("alpha_vs_layer.png", "power_law.png"),
            about="Offsets of random-init models at several depths, fitted per layer above the float32 noise floor.",
            quick=("quick", dict(depths=(1, 2, 4), length=1024, n_pairs=8)), seconds=60)


def _curvature_ratio(t_min: int, t_max: int) -> float:
    """``PowerLawTolerance.curvature_ratio`` on the bins of integer ``t`` in ``[t_min, t_max]`` (8 per decade)."""
    t = np.arange(t_min, t_max + 1, dtype=np.float64)
    t_bin, curvature = log_binned(t, np.log(t) ** 2, t_min=t_min, t_max=t_max)
    return PowerLawTolerance.curvature_ratio(np.log(t_bin), curvature)


# The prediction is held to POWER_LAW_TOLERANCE times its record's ratio (on the record's own window); on the quick
# profile's window, [32, 2048], that ratio is this (3.71), quoted in the criterion.
QUICK_HOLDOUT_RATIO = _curvature_ratio(32, PROFILES["quick"]["length"])


class Depth(TypedDict):
    """One depth: per layer, the alpha fit and the power-law tolerance record (``PowerLawFit`` /
    ``PowerLawTolerance`` records, or ``FitRefused``'s), and the relay model's alpha on the same window."""

    depth: int
    fits: list[Record]
    power_law: list[Record]
    relay_alpha: list[float]


class Summary(PartSummary):
    """What ``run`` saves in summary.json and the claims read (``claims.check_summary``)."""

    rows: list[Depth]
    paper_range_untrained: NotRequired[list[float]]


def run(profile: str, out: Path, seed: int = 0, settings: dict | None = None) -> Summary:
    p = dict(PROFILES[profile], **(settings or {}))
    rows = []
    for depth in p["depths"]:
        model, pairs = untrained_model_and_pairs(p, depth, seed)
        print(f"depth {depth}: {p['n_pairs']} pairs, T = {p['length']}", flush=True)
        m = nh.measure(model, pairs, progress=True)
        m.save(out / f"depth_{depth}", meta=dict(experiment="untrained_alpha", seed=seed))
        rows.append(Depth(depth=depth, fits=[fit.to_dict() for fit in m.fits], power_law=power_law(m),
                         relay_alpha=relay_alphas(p["prompt_len"], p["length"], m.fits, 32)))
    result = Summary(profile=profile, settings=p, seed=seed, paper_range_untrained=list(UNTRAINED_RANGE), rows=rows)
    return write_summary(out, result, draw, draw_power_law)


def power_law(m: nh.Measurement) -> list[dict]:
    """Per layer, how far the offsets are from a power law on the window of the layer's alpha fit
    (``fit.power_law_tolerance``; the relay model's shape among the alternatives); a ``FitRefused``'s
    dict where the layer was not fitted or its window holds too few bins."""
    t, l2 = m.offsets.t, m.offsets.l2
    relay_shapes = np.asarray(nh.relay.offsets(m.offsets.prompt_len, t.size, l2.shape[1] - 1))
    rows = []
    for layer, fit in enumerate(m.fits, start=1):
        if isinstance(fit, nh.FitRefused):
            rows.append(fit.to_dict())
            continue
        try:
            rows.append(nh.power_law_tolerance(t, l2[:, layer], t_min=fit.t_range[0], t_max=fit.t_range[1],
                                               shapes={"relay": relay_shapes[layer]}).to_dict())
        except ValueError as err:  # a window too short for six bins
            rows.append(nh.FitRefused(str(err)).to_dict())
    return rows


def draw(out: Path) -> None:
    saved = load_json(out / "summary.json")
    fig = Figure(figsize=(6, 4.2))
    ax = fig.subplots()
    lo, hi = saved["paper_range_untrained"]
    ax.axhspan(lo, hi, color="grey", alpha=0.2, label=f"paper, untrained: {lo} to {hi}")
    for row in saved["rows"]:
        table = nh.alpha_table([nh.fit_from_dict(f) for f in row["fits"]])
        layers = np.flatnonzero(np.isfinite(table[:, 0])) + 1
        alpha, lo, hi = table[layers - 1].T
        ax.errorbar(layers, alpha, yerr=[alpha - lo, hi - alpha], marker="o", capsize=3, label=f"depth {row['depth']}")
    first = nh.fit_from_dict(saved["rows"][0]["fits"][0])
    window = list(first.t_range) if isinstance(first, nh.PowerLawFit) else None
    ax.set(xlabel="layer", ylabel="alpha", title=f"untrained models, fit window t in {window}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(out / "alpha_vs_layer.png", fig)


def draw_power_law(out: Path) -> None:
    """``power_law.png``: each depth's last layer, the log residuals of its best power law and of the
    power law fitted to the window's first half (a prediction of the second), against the tolerances
    the claim is judged at (``POWER_LAW_TOLERANCES``; the prediction's derived from them,
    ``PowerLawTolerance.holdout_tolerance``, on the deepest model's window)."""
    saved = load_json(out / "summary.json")
    fig = Figure(figsize=(11, 4))
    ax_fit, ax_ahead = fig.subplots(1, 2, sharey=True)
    scales = {ax_fit: lambda tol: tol, ax_ahead: lambda tol: tol}  # the prediction's: the deepest model's ratio
    for row in saved["rows"]:
        record = nh.fit_from_dict(row["power_law"][-1]) if row.get("power_law") else None
        if not isinstance(record, nh.PowerLawTolerance):
            continue
        scales[ax_ahead] = record.holdout_tolerance
        t_bin = np.asarray(record.t_bin)
        label = f"depth {row['depth']}, last layer"
        ax_fit.semilogx(t_bin, record.residuals, "o-", ms=3, label=label)
        ax_ahead.semilogx(t_bin[len(t_bin) - len(record.holdout_residuals):], record.holdout_residuals, "o-", ms=3,
                          label=label)
    for ax in (ax_fit, ax_ahead):
        for tol in POWER_LAW_TOLERANCES:
            style = dict(color="grey", lw=1.2 if tol == POWER_LAW_TOLERANCE else 0.6,
                         ls="-" if tol == POWER_LAW_TOLERANCE else ":")
            ax.axhline(scales[ax](tol), **style)
            ax.axhline(-scales[ax](tol), **style)
        ax.axhline(0, color="k", lw=0.5)
        ax.set_xlabel("continuation position t")
    ax_fit.set(ylabel="log residual (0.10: about 10 %)", title="best power law over the window")
    ax_ahead.set(title="second half, predicted from the first (tolerances x R, the curvature ratio)")
    if ax_fit.get_legend_handles_labels()[0]:
        ax_fit.legend(fontsize=8)
    else:  # every window too short (a smoke run): say so rather than draw an empty legend
        ax_fit.text(0.5, 0.5, "no layer's window holds 6 bins", transform=ax_fit.transAxes, ha="center")
    fig.tight_layout()
    save_figure(out / "power_law.png", fig)


# ---------------------------------------------------------------- the claims this part measures


def _deepest_last_layer(summary: Summary) -> PowerLawFit | FitRefused:
    return fit_from_dict(summary["rows"][-1]["fits"][-1])


def _power_law(summary: Summary):
    rows = summary["rows"]
    records = [(row["depth"], k, fit_from_dict(r)) for row in rows for k, r in enumerate(row.get("power_law", []), start=1)]
    depth, layer, judged = records[-1] if records else (None, None, None)
    if not isinstance(judged, PowerLawTolerance):
        return criteria.unmeasured("the deepest model's last layer could not be held against a power law"
                                   + (f": {judged.reason}" if isinstance(judged, FitRefused) else ""))
    measured = [(d, k, r) for d, k, r in records if isinstance(r, PowerLawTolerance)]
    evidence = dict(depth=depth, layer=layer, deviation=judged.deviation, deviation_interval=judged.ci,
                    holdout=judged.holdout, holdout_interval=judged.holdout_ci, holdout_ratio=judged.holdout_ratio,
                    holdout_tolerance=judged.holdout_tolerance(POWER_LAW_TOLERANCE), window=list(judged.t_range),
                    decades=judged.decades, cv_error=judged.cv_error,
                    at_tolerance={f"{tol:g}": _within_text(judged.within(tol)) for tol in POWER_LAW_TOLERANCES},
                    all_layers=[dict(depth=d, layer=k, deviation=r.deviation, holdout=r.holdout) for d, k, r in measured])
    best_cv = min(judged.cv_error, key=judged.cv_error.get) if judged.cv_error else None
    text = (f"depth {depth}, last layer, t in {list(judged.t_range)} ({judged.decades:.2f} decades): largest |log residual| "
            f"of the best power law {criteria.value_text(judged.deviation, judged.ci)}, second half predicted from the first "
            f"{criteria.value_text(judged.holdout, judged.holdout_ci)} (held to {POWER_LAW_TOLERANCE:g} x "
            f"{judged.holdout_ratio:.2f} = {judged.holdout_tolerance(POWER_LAW_TOLERANCE):.3f}); at tolerance "
            + ", ".join(f"{k}: {v}" for k, v in evidence["at_tolerance"].items())
            + (f"; lowest cross-validated error: {best_cv} ({judged.cv_error[best_cv]:.3f}, power "
               f"{judged.cv_error['power']:.3f})" if best_cv else ""))
    if judged.decades < MIN_DECADES:
        return criteria.unmeasured(text + f"; the window spans fewer than {MIN_DECADES} decades", **evidence)
    within = judged.within(POWER_LAW_TOLERANCE)
    if within is None:
        return Judgement(text, judged.ci, NOT_MEASURED, evidence)
    return criteria.judged(text, judged.ci, within, **evidence)


def _within_text(within: bool | None) -> str:
    return {True: "agree", False: "disagree", None: NOT_MEASURED}[within]


def _untrained(summary: Summary):
    fit = _deepest_last_layer(summary)
    if isinstance(fit, FitRefused):
        return criteria.unmeasured(fit.reason)
    depth = summary["rows"][-1]["depth"]
    fitted = [a for row in summary["rows"] for a in alphas(criteria.read_fits(row["fits"])) if a is not None]
    relay = summary["rows"][-1].get("relay_alpha")
    text = (f"{fit.alpha:.2f} (last layer, depth {depth}); all layers {min(fitted):.2f} to {max(fitted):.2f}"
            + (f"; the relay model at the same depth and window: {relay[-1]:.2f}" if relay else ""))
    return criteria.decided(text, criteria.alpha_interval(fit), criteria.in_range(fit, *UNTRAINED_RANGE), depth=depth,
                           last_layer_interval=criteria.alpha_interval(fit),
                           window=list(fit.t_range), relay_alpha_per_layer=relay)


CLAIMS = (
    Claim("power_law", "The offset decays approximately as a power law t^-alpha (within a stated tolerance)",
          "d(t) ~ t^-alpha", ("untrained_alpha",),
          "The last layer of the deepest small untrained model (chosen beforehand), on its alpha fit's window, of at "
          f"least {MIN_DECADES} decades: the largest |log residual| of the best power law over the log-binned mean curve, "
          "and the largest |log residual| on the window's second half of the power law fitted to its first half, each "
          f"with a 95 % t-interval over pairs. The first is held to {POWER_LAW_TOLERANCE} (about "
          f"{POWER_LAW_TOLERANCE:.0%}); the second to {POWER_LAW_TOLERANCE} times R, R the ratio of the second to the "
          "first for a unit log-log curvature (log d = (log t)^2, a local exponent drifting linearly in log t) on the "
          f"window's own bins: 13/4 for many equal bins split evenly, {QUICK_HOLDOUT_RATIO:.2f} on the quick profile's "
          f"[32, {PROFILES['quick']['length']}] (so {POWER_LAW_TOLERANCE * QUICK_HOLDOUT_RATIO:.3f}), so that both "
          "tolerances describe the same departure from a power law. Agree if both intervals end at or below their "
          "tolerances; disagree if either starts above its own; not measured otherwise or on a shorter "
          f"window. Reported beside: the verdict at {', '.join(f'{t:g}' for t in POWER_LAW_TOLERANCES)}, every layer's "
          "deviations, and the alternatives (log-power, relay shape, exponential, stretched exponential) by error "
          "cross-validated over pairs.", _power_law),
    Claim("untrained_alpha", "Untrained models forget slowly (small models, d_model 128)", "alpha 0.2 to 0.5",
          ("untrained_alpha",),
          f"The deepest small untrained model; {criteria.WINDOW_CRITERION}. {criteria.range_criterion(*UNTRAINED_RANGE)}",
          _untrained),
)


def main() -> None:
    args = parse_experiment_args(experiment_parser(__doc__, "untrained_alpha", PROFILES))
    result = run(args.profile, args.out, args.seed)
    for row in result["rows"]:
        cells = [nh.fit_from_dict(f).brief() for f in row["fits"]]
        print(f"depth {row['depth']}: " + "; ".join(cells))


if __name__ == "__main__":
    main()
