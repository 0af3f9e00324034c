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

from nohair_jax import criteria
from nohair_jax.bound import BoundRow, NotApplicable, ShapeCheck, check_bound, check_row, explicit_from_saved, shape_from_dict
from nohair_jax.parts import Part
from nohair_jax.claims import CHECK, Claim, Judgement, PartSummary
from nohair_jax.experiments import experiment_parser, parse_experiment_args, untrained_model_and_pairs, write_summary
from nohair_jax.results import load_json, save_figure

PROFILES = {
    "smoke": dict(depths=(1, 2), d_model=32, prompt_len=4, length=128, n_pairs=2),
    "quick": dict(depths=(1, 2, 4), d_model=128, prompt_len=16, length=512, n_pairs=8),
    "full": dict(depths=(1, 2, 4, 6), d_model=256, prompt_len=16, length=4096, n_pairs=32),
}

PART = Part(order=7, title="The no-hair bound on untrained models", figures=("bound_margins.png",),
            about="The theorem's conditions measured and the explicit bound held against the measured offsets.", seconds=30)


class Summary(PartSummary):
    """What ``run`` saves in summary.json and the claims read (``claims.check_summary``): one
    ``BoundRow`` per depth."""

    rows: list[BoundRow]


def run(profile: str, out: Path, seed: int = 0, settings: dict | None = None) -> Summary:
    p = dict(PROFILES[profile], **(settings or {}))
    rows = []
    for depth in p["depths"]:
        model, pairs = untrained_model_and_pairs(p, depth, seed)
        print(f"depth {depth}: checking the bound on {p['n_pairs']} pairs, T = {p['length']}", flush=True)
        checked = check_bound(model, pairs, out / f"depth_{depth}", seed=seed, meta=dict(experiment="bound_check"))
        rows.append(check_row(checked))
    result = dict(profile=profile, settings=p, seed=seed, rows=rows)
    return write_summary(out, result, draw)


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


# ---------------------------------------------------------------- the claims this part measures


def _conditions(summary: Summary):
    rows = summary["rows"]
    failures = [f for row in rows for f in row["failures"]]
    logit = max(max(row["logit_bound"]) for row in rows)
    sigma = min(row["sigma_min_over_floor"] for row in rows)
    text = f"largest logit B = {logit:.3g}; smallest sigma_min = {sigma:.3g} x sqrt(eps); depths {[r['depth'] for r in rows]}"
    return criteria.judged(text + (f"; fails: {failures[0]}" if failures else ""), None, not failures, largest_logit=logit,
                           sigma_min_over_sqrt_eps=sigma, failures=failures)


def _bound_holds(summary: Summary):
    checks = [explicit_from_saved(r["explicit"]) for r in summary["rows"]]
    entries = [e for c in checks if not isinstance(c, NotApplicable) for e in c]
    if not entries:
        return criteria.unmeasured("the bound does not apply to the measured models")
    margins = [e.margin for e in entries]
    holds = all(e.holds for e in entries)
    text = (f"explicit bound {'above every' if holds else 'below some'} measured offset; "
            f"smallest margin bound/measured = {min(margins):.3g}")
    return criteria.judged(text, None, holds, margins=margins)


def _relay_logs(summary: Summary):
    shape = criteria.shape_test([e for r in summary["rows"] for e in r["shape"]])
    if shape is None:
        return criteria.unmeasured("shape check could not be fitted")
    text, interval, verdict, evidence = shape
    return Judgement(text, interval, verdict, evidence)


CLAIMS = (
    Claim("bound_conditions", "The bound's conditions hold on the small untrained models: bounded logits, pre-norm "
          "activations away from zero", "B finite, sigma_min > 0", ("bound_check",),
          "As for the language model, on the small untrained models at every depth measured. Fail if any "
          "condition fails.", _conditions, CHECK),
    Claim("bound_holds", "The explicit bound C_L P (log t)^(L-1) / t is never exceeded (small untrained models; "
          "margins of thousands: an implementation check)",
          "offset <= C_L P (log t)^(L-1) / t", ("bound_check",),
          "The explicit bound, with constants computed from the measured conditions, against the largest offset over "
          "pairs at every layer and t. Agree if the bound is at or above every measured offset, disagree if any offset "
          "exceeds it; not measured where the bound does not apply.", _bound_holds, CHECK),
    Claim("relay_only_logs", "Relay can only add logarithmic factors: offsets decay at least like the relay shape",
          "slope of offset / shape <= 0", ("bound_check",),
          "Per layer, the log-log slope of offset / relay-model offset over t in [T/16, T], with a t-interval over "
          f"pairs. Agree if {criteria.SHAPE_AGREE}; disagree if {criteria.SHAPE_DISAGREE} (offsets decaying more slowly "
          "than the relay shape); otherwise not measured.", _relay_logs),
)


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
