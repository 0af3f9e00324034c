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

import numpy as np
from matplotlib.figure import Figure

from nohair_jax import relay
from nohair_jax.experiments import experiment_parser, parse_experiment_args
from nohair_jax.results import load_json, save_figure, save_json

PROFILES = {
    "smoke": dict(prompt_len=4, depths=(1, 2, 3), exact_length=64, length=2048, t_max=1e6),
    "quick": dict(prompt_len=16, depths=(1, 2, 3, 4), exact_length=256, length=65536, t_max=1e12),
    "full": dict(prompt_len=16, depths=(1, 2, 3, 4, 6, 8), exact_length=1024, length=1 << 20, t_max=1e30),
}


def _max_rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b) / np.abs(b)))


def run(profile: str, out: Path, seed: int = 0, settings: dict | None = None) -> dict:
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
    save_json(out / "summary.json", result)
    draw(out)
    return result


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


def main() -> None:
    args = parse_experiment_args(experiment_parser(__doc__, "relay_model", PROFILES, seed=False))
    for row in run(args.profile, args.out)["rows"]:
        ratios = ", ".join(f"{r:.3g}" for r in row["ratio_to_shape"])
        print(f"L = {row['depth']}: recursion vs exact {row['recursion_vs_exact']:.1e}, vs closed "
              f"{row['recursion_vs_closed']:.1e}; ratio to shape {ratios} -> {row['ratio_limit']:.3g}")


if __name__ == "__main__":
    main()
