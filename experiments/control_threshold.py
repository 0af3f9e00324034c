"""The control threshold: final consensus against the control gain, beside the theory's threshold.

The theory (nohair_jax.dynamics.consensus_control): attention's drift is at most b = ||V||_2 per
token, so a control u = g (e_1 - x) with g > b brings every token (outside a small antipodal cap)
within angle arcsin(b / g) of e_1: final diameter <= 2 b / g. The threshold is g = b; consensus
to eps is guaranteed from g = 2 b / eps. This sweeps the gain ratio r = g / ||V|| over a log
grid, the same random draws at every gain (nohair_jax.token_dynamics.gain_sweep), and reports
where the measured transition sits: the gain at which the median final diameter crosses eps and
the gains at which 50 %, 90 % and all draws reach it, against r = 1 and r = 2 / eps.

Random draws are not worst cases. So at a few gains, for each token count n and dimension d
searched, an adversary starts from random draws and moves their (Q, K, V) by gradient ascent on
the diameter through the differentiable simulation (``token_dynamics.adversarial_diameters``):
the worst final diameter it finds per gain says where consensus can really be defeated.

    python experiments/control_threshold.py --out results/control_threshold     # quick: 256 draws, 14 gains
    python experiments/control_threshold.py --profile full --out results/control_threshold

The same random draws at other token counts n, dimensions d and inverse temperatures beta (``Q``
scaled by beta, so the logits are) on a coarser gain grid give the threshold map: the smallest
gain at which every draw reaches eps, per (n, d, beta). ``||V||`` itself needs no sweep: with time
in units of ``1 / ||V||`` and the gain in units of ``||V||`` the dynamics do not depend on it
(``nohair_jax.token_dynamics``, "Units").

Writes ``summary.json``, ``series.npz``, ``measures.png`` (measures against time per gain) and
``threshold.png`` (final diameter, fraction reached and clusters against gain).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import NotRequired, TypedDict

import numpy as np

from nohair_jax import criteria
from nohair_jax.parts import Part
from nohair_jax.claims import Claim
from nohair_jax.experiments import experiment_parser, parse_experiment_args
from nohair_jax.results import save_json
from nohair_jax.token_dynamics import (adversarial_diameters, cluster_goals, gain_sweep, random_systems,
                                      simulate_systems, sweep_table)

PROFILES = {
    "smoke": dict(gains=(0, 0.1, 1, 10), draws=16, n=6, d=3, heads=1, steps=200, dt=0.05, eps=0.1, records=20,
                  adversarial=dict(gains=(0.5, 20), shapes=((6, 3),), draws=2, iterations=3, steps=50, dt=0.04),
                  grid=dict(gains=(1, 20), shapes=((6, 3),), betas=(0.1, 10), draws=4, steps=100, dt=0.05)),
    "quick": dict(gains=(0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100), draws=256, n=16, d=3, heads=1,
                  steps=1000, dt=0.02, eps=0.1, records=60,
                  adversarial=dict(gains=(0.5, 1, 2, 20), shapes=((16, 3), (16, 8)), draws=8, iterations=30, steps=500,
                                   dt=0.04),
                  grid=dict(gains=(0.5, 1, 2, 5, 10, 20), shapes=((16, 3), (8, 3), (16, 8)), betas=(0.1, 1, 10), draws=64,
                            steps=1000, dt=0.02)),
    "full": dict(gains=(0, 0.01, 0.014, 0.02, 0.03, 0.05, 0.07, 0.1, 0.14, 0.2, 0.3, 0.5, 0.7, 1, 1.4, 2, 3, 5, 7, 10,
                        20, 50, 100, 200), draws=2048, n=32, d=3, heads=1, steps=4000, dt=0.005, eps=0.1, records=100,
                 adversarial=dict(gains=(0.25, 0.5, 1, 1.5, 2, 5, 20), shapes=((16, 3), (32, 3), (16, 8)), draws=64,
                                  iterations=60, steps=1000, dt=0.02),
                 grid=dict(gains=(0.25, 0.5, 1, 1.5, 2, 3, 5, 10, 20, 50), shapes=((16, 3), (32, 3), (8, 3), (16, 8), (32, 16)),
                           betas=(0.1, 0.3, 1, 3, 10), draws=512, steps=4000, dt=0.005)),
}

# The full reproduction's plan; the quick one halves its draws to fit the main job's 15 minutes.
_FULL_PLAN = dict(
    draws=64,
    adversarial=dict(gains=(0.5, 1, 2, 20), shapes=((16, 3), (8, 8)), draws=4, iterations=20, steps=500, dt=0.04),
    grid=dict(gains=(0.5, 1, 2, 5, 10, 20), shapes=((16, 3), (16, 8)), betas=(0.1, 1, 10), draws=16, steps=500, dt=0.04))

PART = Part(order=12, title="Token dynamics: the control gain's threshold", figures=("threshold.png",),
            about="Final diameter and fraction of draws reaching consensus against the control gain, beside the "
                  "theory's threshold.",
            quick=("quick", dict(_FULL_PLAN, draws=32, grid=dict(_FULL_PLAN["grid"], draws=8))),
            full=("quick", _FULL_PLAN), seconds=70)


def adversarial(search: dict, eps: float, seed: int) -> dict:
    """The worst final diameters the adversary finds, per (n, d) and gain ratio."""
    rows = []
    for n, d in search["shapes"]:
        systems = random_systems(seed, search["draws"], n, d)
        for gain in search["gains"]:
            worst = adversarial_diameters(systems, gain, dt=search["dt"], steps=search["steps"],
                                          iterations=search["iterations"])
            rows.append(dict(n=n, d=d, gain_ratio=gain, worst=float(worst.max()), reached=float(np.mean(worst < eps)),
                             diameters=worst.tolist()))
    return dict(settings=dict(search, horizon=search["steps"] * search["dt"], eps=eps), rows=rows)


def threshold_map(grid: dict, eps: float, seed: int) -> dict:
    """Per (n, d, inverse temperature beta): the fraction of random draws whose final diameter is below
    eps at each gain of the grid, and the smallest grid gain at which every draw is."""
    rows = []
    for n, d in grid["shapes"]:
        goal = cluster_goals(n, d, 1)
        for beta in grid["betas"]:
            systems = random_systems(seed, grid["draws"], n, d, beta=beta)
            reached = [float(np.mean(simulate_systems(systems, goal, gain, dt=grid["dt"], steps=grid["steps"], tol=eps,
                                                      record=(0,)).diameter[:, -1] < eps)) for gain in grid["gains"]]
            rows.append(dict(n=n, d=d, beta=beta, gains=list(grid["gains"]), reached=reached,
                             reached_all=next((g for g, r in zip(grid["gains"], reached) if r == 1.0), None)))
    return dict(settings=dict(grid, horizon=grid["steps"] * grid["dt"], eps=eps), rows=rows)


class GainRow(TypedDict):
    """Random draws at one control gain (``gain_ratio``, units of ||V||): the fraction reaching eps."""

    gain_ratio: float
    reached: float


class Transition(TypedDict):
    """Where the random draws cross (``token_dynamics.gain_sweep``); ``reached_all``: the smallest gain
    at which every draw reached eps (None: none)."""

    reached_all: float | None


class AdversarialRow(TypedDict):
    """(Q, K, V) found by gradient ascent on the diameter at one (n, d) and gain: the worst final diameter."""

    n: int
    d: int
    gain_ratio: float
    reached: float
    worst: float


class Adversarial(TypedDict):
    rows: list[AdversarialRow]


class GridRow(TypedDict):
    """Random draws at one (n, d, beta): the fraction reaching eps at each gain."""

    n: int
    d: int
    beta: float
    gains: list[float]
    reached: list[float]
    reached_all: float | None


class Grid(TypedDict):
    rows: list[GridRow]


class Settings(TypedDict):
    eps: float


class Summary(TypedDict):
    """What ``run`` saves in summary.json and the claims read (``claims.check_summary``)."""

    settings: Settings
    rows: list[GainRow]
    transition: Transition
    adversarial: Adversarial
    grid: NotRequired[Grid]
    meta: NotRequired[dict]


def run(profile: str, out: Path, seed: int = 0, settings: dict | None = None) -> Summary:
    """Run the profile (``settings`` override its values), save, draw; returns the summary."""
    p = dict(PROFILES[profile], **(settings or {}))
    search, grid = p.pop("adversarial"), p.pop("grid")
    summary = gain_sweep(Path(out), **p, seed=seed, meta=dict(experiment="control_threshold", profile=profile))
    summary["adversarial"] = adversarial(search, p["eps"], seed)
    summary["grid"] = threshold_map(grid, p["eps"], seed)
    save_json(Path(out) / "summary.json", summary)
    return summary


# ---------------------------------------------------------------- the claims this part measures


def adversarial_at(summary: Summary, gain: float) -> list[AdversarialRow]:
    """The adversarial search's rows at ``gain`` (one per (n, d) searched)."""
    return [r for r in summary["adversarial"]["rows"] if abs(r["gain_ratio"] - gain) < 1e-9]


def _threshold(summary: Summary):
    ct = summary
    tr, rows, adv = ct["transition"], ct["rows"], ct["adversarial"]["rows"]
    eps = ct["settings"]["eps"]
    guarantee = 2 / eps
    shapes = sorted({(r["n"], r["d"]) for r in adv})
    evidence = dict(gains=[r["gain_ratio"] for r in rows], reached=[r["reached"] for r in rows], transition=tr,
                    adversarial=[dict(n=r["n"], d=r["d"], gain_ratio=r["gain_ratio"], worst=r["worst"]) for r in adv])
    if not shapes or not any(r["gain_ratio"] <= 1 for r in adv) or not adversarial_at(summary, guarantee):
        return criteria.unmeasured(f"the adversary did not search both a gain at or below ||V|| and {guarantee:g} ||V||", **evidence)
    parts, ok = [], True
    for n, d in shapes:
        mine = sorted((r for r in adv if (r["n"], r["d"]) == (n, d)), key=lambda r: r["gain_ratio"])
        defeated = [r["gain_ratio"] for r in mine if r["reached"] < 1.0]
        held = [r["gain_ratio"] for r in mine if r["reached"] == 1.0]
        ok &= any(g <= 1 for g in defeated) and guarantee in held
        parts.append(f"n {n}, d {d}: consensus defeated at {defeated or 'no gain'}, held at {held or 'no gain'} ||V||")
    grid = ct.get("grid", {}).get("rows", [])
    random_ok = all(r["reached"] == 1.0 for r in rows if r["gain_ratio"] >= guarantee) and all(
        reached == 1.0 for r in grid for g, reached in zip(r["gains"], r["reached"]) if g >= guarantee)
    evidence["grid"] = [dict(n=r["n"], d=r["d"], beta=r["beta"], reached_all=r["reached_all"]) for r in grid]
    every = sorted({r["reached_all"] for r in grid}, key=lambda g: math.inf if g is None else g)
    text = (f"adversarial (Q, K, V): {'; '.join(parts)}; random draws: every draw from {tr['reached_all']} ||V||"
            + (f", and over {len(grid)} (n, d, beta) from {every} ||V||" if grid else "")
            + f"; theory: threshold 1 ||V||, eps guaranteed from {guarantee:g} ||V||")
    return criteria.judged(text, None, ok and random_ok, **evidence)


CLAIMS = (
    Claim("ff_threshold", "Consensus shows a threshold in the control gain (theory: gain > ||V|| suffices)",
          "threshold at gain ~ ||V||", ("control_threshold",),
          "Final diameter against the control gain r (units of ||V||), for random draws and for (Q, K, V) found by "
          "gradient ascent on the diameter through the simulation, at every (n, d) searched, and random draws at several "
          "(n, d, inverse temperature beta) on a coarser grid (||V|| needs no sweep: in these units the dynamics do not "
          "depend on it). The theory: nothing is "
          "guaranteed at r <= 1, eps is guaranteed from r = 2 / eps. Agree if at every (n, d) the adversary defeats "
          "consensus at some r <= 1 and no draw, random or adversarial, misses eps at r = 2 / eps or above; disagree "
          "otherwise (a threshold below ||V||, or a failure where eps is guaranteed); not measured if those gains were "
          "not searched.", _threshold),
)


def main() -> None:
    args = parse_experiment_args(experiment_parser(__doc__, "control_threshold", PROFILES))
    summary = run(args.profile, args.out, args.seed)
    print(sweep_table(summary))
    for row in summary["grid"]["rows"]:
        print(f"random draws n {row['n']}, d {row['d']}, beta {row['beta']:g}: all below eps from "
              f"{row['reached_all']} ||V|| (reached {', '.join(f'{r:.0%}' for r in row['reached'])} at {row['gains']})")
    for row in summary["adversarial"]["rows"]:
        print(f"adversarial n {row['n']}, d {row['d']}, gain {row['gain_ratio']:g} ||V||: worst final diameter "
              f"{row['worst']:.3g}, {row['reached']:.0%} of {len(row['diameters'])} below eps")


if __name__ == "__main__":
    main()
