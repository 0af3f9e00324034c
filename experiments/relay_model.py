"""The exactly solvable linear relay model: its forms agree, its shape is the bound's
(docs/definitions.md#bound).

Three checks and two curves, all from ``nohair_jax.relay``:

* the cumsum recursion (float64) against exact rational arithmetic and against the closed form
  in digamma / Hurwitz zeta (largest relative differences);
* "the bound cannot be improved": ``delta_L(t) / (P (log t)^(L-1) / t)`` tends to the positive
  constant ``1 / (L-1)!``, so the solvable model attains the bound's shape;
* the local exponent ``-d log delta_L / d log t`` rises towards 1 with ``t``, slower the deeper
  the model, with and without the residual path.

    python experiments/relay_model.py --out results/relay_model

Writes ``summary.json`` and ``relay_model.png`` (drawn from it).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import NotRequired, TypedDict

import numpy as np
from matplotlib.figure import Figure

from nohair_jax import criteria, relay
from nohair_jax.parts import Part
from nohair_jax.claims import CHECK, Claim, PartSummary
from nohair_jax.experiments import experiment_parser, parse_experiment_args, write_summary
from nohair_jax.results import load_json, save_figure

PROFILES = {
    "smoke": dict(prompt_len=4, depths=(1, 2, 3), exact_length=64, length=2048, t_max=1e6),
    "quick": dict(prompt_len=16, depths=(1, 2, 3, 4), exact_length=256, length=65536, t_max=1e12),
    "full": dict(prompt_len=16, depths=(1, 2, 3, 4, 6, 8), exact_length=1024, length=1 << 20, t_max=1e30),
}

PART = Part(order=2, title="The solvable relay model", figures=("relay_model.png",),
            about="The linear relay recursion, its exact rational and closed forms, and its shape against the "
                  "bound's.")


def _max_rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b) / np.abs(b)))


class RelayRow(TypedDict):
    """One depth: the exact model's delta_L / (P (log t)^(L-1) / t) at ``ratio_t``, and its limit 1 / (L-1)!."""

    depth: int
    ratio_t: list[float]
    ratio_to_shape: list[float]
    ratio_limit: float
    recursion_vs_exact: float
    recursion_vs_closed: float
    local_exponent: NotRequired[list[float]]
    local_exponent_residual: NotRequired[list[float]]


class Summary(PartSummary):
    """What ``run`` saves in summary.json and the claims read (``claims.check_summary``)."""

    rows: list[RelayRow]
    t: NotRequired[list[float]]


def run(profile: str, out: Path, seed: int = 0, settings: dict | None = None) -> Summary:
    del seed  # deterministic: nothing is drawn
    p = dict(PROFILES[profile], **(settings or {}))
    P, depth = p["prompt_len"], max(p["depths"])
    exact = relay.offsets_exact(P, p["exact_length"], depth)
    recursion = np.asarray(relay.offsets(P, p["length"], depth))
    t_all = np.arange(1, p["length"] + 1, dtype=np.float64)
    t = np.logspace(0, math.log10(p["t_max"]), 200)
    rows = []
    for L in p["depths"]:
        ratio_t = np.logspace(3, math.log10(p["t_max"]), 4)
        shape = P * np.log(ratio_t) ** (L - 1) / ratio_t
        rows.append(dict(
            depth=L,
            recursion_vs_exact=_max_rel(recursion[L, : p["exact_length"]], [float(x) for x in exact[L]]),
            recursion_vs_closed=_max_rel(recursion[L], relay.closed_form(P, t_all, L)),
            ratio_t=ratio_t,
            ratio_to_shape=np.asarray(relay.closed_form(P, ratio_t, L)) / shape,
            ratio_limit=1 / math.factorial(L - 1),
            local_exponent=np.asarray(relay.local_exponent(P, t, L)),
            local_exponent_residual=np.asarray(relay.local_exponent(P, t, L, residual=True)),
        ))
    result = dict(profile=profile, settings=p, t=t, rows=rows)
    return write_summary(out, result, draw)


def draw(out: Path) -> None:
    saved = load_json(out / "summary.json")
    P = saved["settings"]["prompt_len"]
    fig = Figure(figsize=(11, 4.2))
    ax_exp, ax_ratio = fig.subplots(1, 2)
    for k, row in enumerate(saved["rows"]):
        color = f"C{k}"
        ax_exp.semilogx(saved["t"], row["local_exponent"], "-", color=color, label=f"L = {row['depth']}")
        ax_exp.semilogx(saved["t"], row["local_exponent_residual"], ":", color=color)
        ax_ratio.loglog(row["ratio_t"], row["ratio_to_shape"], "o-", color=color, label=f"L = {row['depth']}")
        ax_ratio.axhline(row["ratio_limit"], color=color, lw=0.8, ls="--")
    ax_exp.axhline(1.0, color="grey", lw=0.8)
    ax_exp.set(xlabel="t", ylabel="local exponent", title=f"relay model, P = {P} (dotted: with residual)")
    ax_exp.legend(fontsize=8)
    ax_ratio.set(xlabel="t", ylabel="delta_L / (P (log t)^(L-1) / t)", title="ratio to the bound's shape; dashed: 1/(L-1)!")
    ax_ratio.legend(fontsize=8)
    fig.tight_layout()
    save_figure(out / "relay_model.png", fig)


# ---------------------------------------------------------------- the claims this part measures


ENDS_ABOVE = 0.5  # "approaches its limit": the ratio ends above this share of it
ROUNDING = 1e-9  # "at or below its limit" up to the float rounding of the exact ratio
FORMS_RTOL = 1e-9  # the float64 recursion against the exact rationals and the closed form (they agree to ~1e-15)


def _bound_tight(summary: Summary):
    rows = summary["rows"]
    deep = [r for r in rows if r["depth"] >= 2]
    approaching = all(np.all(np.diff(r["ratio_to_shape"]) > 0) and r["ratio_to_shape"][-1] <= r["ratio_limit"] * (1 + ROUNDING)
                      and r["ratio_to_shape"][-1] > ENDS_ABOVE * r["ratio_limit"] for r in deep)
    forms = [max(r["recursion_vs_exact"], r["recursion_vs_closed"]) for r in rows]
    t_max = rows[0]["ratio_t"][-1]
    text = "; ".join(f"L={r['depth']}: {r['ratio_to_shape'][-1]:.3g} -> {r['ratio_limit']:.3g}" for r in deep)
    return criteria.judged(f"delta_L / (P (log t)^(L-1) / t) at t = {t_max:.0e}: {text}; the three forms agree to "
                           f"{max(forms):.1e}", None, approaching and max(forms) < FORMS_RTOL, forms_rel_diff=forms,
                           ratio_at_t_max={r["depth"]: r["ratio_to_shape"][-1] for r in deep},
                           limit={r["depth"]: r["ratio_limit"] for r in deep})


CLAIMS = (
    Claim("bound_tight", "The solvable linear relay model attains the bound: it cannot be improved",
          "delta_L ~ P (log t)^(L-1) / ((L-1)! t)", (), "A mathematical statement about the relay model, proved in "
          "theory/ and checked there; no measurement of a model can contradict it.",
          criteria.proved("bound_tight_check", "a statement proved about the solvable model, not a measurement")),
    Claim("bound_tight_check", "The exact relay model's delta_L approaches P (log t)^(L-1) / ((L-1)! t) from below",
          "delta_L ~ P (log t)^(L-1) / ((L-1)! t)", ("relay_model",),
          "The exact relay model's delta_L / (P (log t)^(L-1) / t) for L >= 2 out to t = 1e12. Pass if it rises "
          f"monotonically, stays at or below 1 / (L-1)! and ends above {ENDS_ABOVE:g} times it, and the float64 recursion "
          f"agrees with the exact rationals and the closed form to {FORMS_RTOL:g} (largest relative difference); fail "
          "otherwise.",
          _bound_tight, CHECK),
)


def main() -> None:
    args = parse_experiment_args(experiment_parser(__doc__, "relay_model", PROFILES, seed=False))
    for row in run(args.profile, args.out)["rows"]:
        ratios = ", ".join(f"{r:.3g}" for r in row["ratio_to_shape"])
        print(f"L = {row['depth']}: recursion vs exact {row['recursion_vs_exact']:.1e}, vs closed "
              f"{row['recursion_vs_closed']:.1e}; ratio to shape {ratios} -> {row['ratio_limit']:.3g}")


if __name__ == "__main__":
    main()
