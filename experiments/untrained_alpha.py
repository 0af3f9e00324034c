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

from matplotlib.figure import Figure

import numpy as np

import nohair_jax as nh
from nohair_jax.experiments import experiment_parser, parse_experiment_args, relay_alphas, untrained_model_and_pairs
from nohair_jax.results import load_json, save_figure, save_json

PROFILES = {
    "smoke": dict(depths=(1, 2), d_model=32, prompt_len=4, length=128, n_pairs=2),
    "quick": dict(depths=(1, 2, 4, 6), d_model=128, prompt_len=16, length=2048, n_pairs=16),
    "full": dict(depths=(1, 2, 4, 6, 8, 12), d_model=256, prompt_len=16, length=8192, n_pairs=64),
}


def run(profile: str, out: Path, seed: int = 0, settings: dict | None = None) -> dict:
    p = dict(PROFILES[profile], **(settings or {}))
    rows = []
    for depth in p["depths"]:
        model, pairs = untrained_model_and_pairs(p, depth, seed)
        print(f"depth {depth}: {p['n_pairs']} pairs, T = {p['length']}", flush=True)
        m = nh.measure(model, pairs, progress=True)
        m.save(out / f"depth_{depth}", meta=dict(experiment="untrained_alpha", seed=seed))
        rows.append(dict(depth=depth, fits=[fit.to_dict() for fit in m.fits], power_law=power_law(m),
                         relay_alpha=relay_alphas(p["prompt_len"], p["length"], m.fits, 32)))
    result = dict(profile=profile, settings=p, seed=seed, paper_range_untrained=[0.2, 0.5], rows=rows)
    save_json(out / "summary.json", result)
    draw(out)
    draw_power_law(out)
    return result


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
    the claim is judged at (``claims.POWER_LAW_TOLERANCES``)."""
    from nohair_jax.claims import POWER_LAW_TOLERANCE, POWER_LAW_TOLERANCES

    saved = load_json(out / "summary.json")
    fig = Figure(figsize=(11, 4))
    ax_fit, ax_ahead = fig.subplots(1, 2, sharey=True)
    for row in saved["rows"]:
        record = nh.fit_from_dict(row["power_law"][-1]) if row.get("power_law") else None
        if not isinstance(record, nh.PowerLawTolerance):
            continue
        t_bin = np.asarray(record.t_bin)
        label = f"depth {row['depth']}, last layer"
        ax_fit.semilogx(t_bin, record.residuals, "o-", ms=3, label=label)
        ax_ahead.semilogx(t_bin[len(t_bin) - len(record.holdout_residuals):], record.holdout_residuals, "o-", ms=3,
                          label=label)
    for ax in (ax_fit, ax_ahead):
        for tol in POWER_LAW_TOLERANCES:
            style = dict(color="grey", lw=1.2 if tol == POWER_LAW_TOLERANCE else 0.6,
                         ls="-" if tol == POWER_LAW_TOLERANCE else ":")
            ax.axhline(tol, **style)
            ax.axhline(-tol, **style)
        ax.axhline(0, color="k", lw=0.5)
        ax.set_xlabel("continuation position t")
    ax_fit.set(ylabel="log residual (0.10: about 10 %)", title="best power law over the window")
    ax_ahead.set(title="second half, predicted from the first")
    if ax_fit.get_legend_handles_labels()[0]:
        ax_fit.legend(fontsize=8)
    else:  # every window too short (a smoke run): say so rather than draw an empty legend
        ax_fit.text(0.5, 0.5, "no layer's window holds 6 bins", transform=ax_fit.transAxes, ha="center")
    fig.tight_layout()
    save_figure(out / "power_law.png", fig)


def main() -> None:
    args = parse_experiment_args(experiment_parser(__doc__, "untrained_alpha", PROFILES))
    result = run(args.profile, args.out, args.seed)
    for row in result["rows"]:
        cells = [nh.fit_from_dict(f).brief() for f in row["fits"]]
        print(f"depth {row['depth']}: " + "; ".join(cells))


if __name__ == "__main__":
    main()
