"""The no-hair bound checked on untrained models of several depths (docs/definitions.md#bound).

For each depth: the theorem's conditions measured (largest attention logit ``B_l``, the floor
``sigma_min`` of every norm's input against ``sqrt(eps)``), the explicit bound held against the
measured offsets at every layer and position (its margin, bound / measured), and the shape check
(the offsets decay at least like the relay model's ``P (log t)^(l-1) / t`` shape). This is
``nohair bound`` over a list of depths.

    python experiments/bound_check.py --out results/bound_check

Writes ``<out>/depth_<L>/{bound.npz, bound.json, bound.png}``, ``<out>/summary.json`` and
``<out>/bound_margins.png`` (drawn from summary.json).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from nohair_jax.bound import NotApplicable, ShapeCheck, check_bound, check_row, explicit_from_saved, shape_from_dict
from nohair_jax.experiments import experiment_parser, parse_experiment_args, untrained_model_and_pairs
from nohair_jax.results import load_json, save_figure, save_json

PROFILES = {
    "smoke": dict(depths=(1, 2), d_model=32, prompt_len=4, length=128, n_pairs=2),
    "quick": dict(depths=(1, 2, 4), d_model=128, prompt_len=16, length=512, n_pairs=8),
    "full": dict(depths=(1, 2, 4, 6), d_model=256, prompt_len=16, length=4096, n_pairs=32),
}


def run(profile: str, out: Path, seed: int = 0, settings: dict | None = None) -> dict:
    p = dict(PROFILES[profile], **(settings or {}))
    rows = []
    for depth in p["depths"]:
        model, pairs = untrained_model_and_pairs(p, depth, seed)
        print(f"depth {depth}: checking the bound on {p['n_pairs']} pairs, T = {p['length']}", flush=True)
        checked = check_bound(model, pairs, out / f"depth_{depth}", seed=seed, meta=dict(experiment="bound_check"))
        rows.append(check_row(checked))
    result = dict(profile=profile, settings=p, seed=seed, rows=rows)
    save_json(out / "summary.json", result)
    draw(out)
    return result


def draw(out: Path) -> None:
    saved = load_json(out / "summary.json")
    fig = Figure(figsize=(6, 4.2))
    ax = fig.subplots()
    for row in saved["rows"]:
        explicit = explicit_from_saved(row["explicit"])
        if isinstance(explicit, NotApplicable):
            continue
        margins = [e.margin for e in explicit]
        ax.semilogy(np.arange(1, len(margins) + 1), margins, "o-", label=f"depth {row['depth']}")
    ax.axhline(1.0, color="k", lw=0.8, label="bound = measured")
    ax.set(xlabel="layer", ylabel="min over t of bound / measured offset",
           title="explicit bound: how far above the measured offsets")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(out / "bound_margins.png", fig)


def main() -> None:
    args = parse_experiment_args(experiment_parser(__doc__, "bound_check", PROFILES))
    for row in run(args.profile, args.out, args.seed)["rows"]:
        holds = "conditions hold" if not row["failures"] else "; ".join(row["failures"])
        explicit = explicit_from_saved(row["explicit"])
        margins = "n/a" if isinstance(explicit, NotApplicable) else ", ".join(f"{e.margin:.3g}" for e in explicit)
        shape = ", ".join("pass" if isinstance(c, ShapeCheck) and c.passes else "fail"
                          for c in map(shape_from_dict, row["shape"]))
        print(f"depth {row['depth']}: {holds}; margins {margins}; shape {shape}")


if __name__ == "__main__":
    main()
