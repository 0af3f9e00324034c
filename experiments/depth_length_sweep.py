"""Alpha against depth and prompt length, over seeds, beside the relay model's prediction.

Two sweeps of untrained models (pre-LN, learned positions, GPT-2 init; ``nohair_jax.sweep``):

1. ``depth_prompt/``: depths x prompt lengths P at one continuation length T. The relay model
   (docs/definitions.md#bound) predicts that alpha falls with depth (one log factor per layer) and
   with P at a fixed window (``P / (P + t)`` is flatter while t is not much larger than P); its
   alpha is fitted over the same window as each measurement.
2. ``lengths/``: one architecture at several continuation lengths T, for offsets against t.

Every seed and pair of a shape runs in one compiled program, sharded over all devices; both
sweeps resume where an interrupted run stopped.

    python experiments/depth_length_sweep.py --out results/depth_length_sweep           # quick
    python experiments/depth_length_sweep.py --profile full --out results/depth_length_sweep

Writes ``<out>/depth_prompt/`` and ``<out>/lengths/`` (sweep folders: cells, summary.json,
alpha_vs_depth.png, alpha_vs_prompt_len.png, offsets_vs_t.png) and ``<out>/summary.json``.
"""

from __future__ import annotations

from pathlib import Path
from typing import NotRequired, TypedDict

import numpy as np

import nohair_jax as nh
from nohair_jax import criteria
from nohair_jax.parts import Part
from nohair_jax.claims import Claim, Judgement, PartSummary, Record
from nohair_jax.fit import paired_difference_or_refuse
from nohair_jax.experiments import experiment_parser, parse_experiment_args
from nohair_jax.results import load_json, save_json
from nohair_jax.sweep import sweep_table

PROFILES = {
    "smoke": dict(
        depth_prompt=dict(depths=(1, 2), widths=(16,), prompt_lens=(4,), lengths=(32,)),
        # One length, the shape of a cell above: the smoke run checks the script, and compiles cost most.
        lengths=dict(depths=(1,), widths=(16,), prompt_lens=(4,), lengths=(32,)),
        shared=dict(seeds=(0, 1), n_pairs=2, fit_t_min=4, n_boot=50),
    ),
    "quick": dict(
        depth_prompt=dict(depths=(1, 2, 4, 6), widths=(128,), prompt_lens=(4, 16, 64), lengths=(1024,)),
        lengths=dict(depths=(4,), widths=(128,), prompt_lens=(16,), lengths=(256, 1024, 4096)),
        shared=dict(seeds=(0, 1, 2, 3), n_pairs=4, fit_t_min=32, n_boot=1000),
    ),
    "full": dict(
        depth_prompt=dict(depths=(1, 2, 4, 6, 8, 12), widths=(128, 256), prompt_lens=(4, 16, 64, 256), lengths=(4096,)),
        lengths=dict(depths=(4, 8), widths=(256,), prompt_lens=(16,), lengths=(1024, 4096, 16384)),
        shared=dict(seeds=tuple(range(16)), n_pairs=16, fit_t_min=32, n_boot=1000),
    ),
}

# The full reproduction's plan; the quick one stops its length sweep at 512 to fit the main job's 15 minutes.
_FULL_PLAN = dict(
    depth_prompt=dict(depths=(1, 2, 4), widths=(128,), prompt_lens=(4, 16, 64), lengths=(512,)),
    lengths=dict(depths=(4,), widths=(128,), prompt_lens=(16,), lengths=(256, 1024)),
    shared=dict(seeds=(0, 1, 2), n_pairs=4, fit_t_min=32, n_boot=1000),
)

PART = Part(order=10, title="Sweeps: alpha against depth, prompt length and continuation length",
            figures=("depth_prompt/alpha_vs_depth.png", "depth_prompt/alpha_vs_prompt_len.png", "lengths/offsets_vs_t.png"),
            about="Untrained models over a grid, every seed and pair of a shape in one compiled program, beside the "
                  "relay model.",
            quick=("quick", dict(_FULL_PLAN, lengths=dict(_FULL_PLAN["lengths"], lengths=(256, 512)))),
            full=("quick", _FULL_PLAN), seconds=80)


class Cell(TypedDict):
    """One cell of a grid: its axes, the last layer's alpha with interval, the relay model's alpha."""

    depth: int
    prompt_len: int
    relay: float
    width: NotRequired[int]
    length: NotRequired[int]
    alpha: NotRequired[float | None]
    ci: NotRequired[list[float] | None]
    t_range: NotRequired[list[int] | None]
    seed_range: NotRequired[list[float] | None]
    relay_no_residual: NotRequired[float]


def _last_layer_rows(summary: dict) -> list[Cell]:
    """One line per cell: its axes, last-layer alpha with interval, per-seed range, relay alpha."""
    rows = []
    for row in summary["rows"]:
        fit = nh.fit_from_dict(row["fits"][-1])
        fitted = isinstance(fit, nh.PowerLawFit)
        seeds = [a[-1] for a in row["seed_alpha"] if a[-1] is not None]
        rows.append(Cell(
            depth=row["depth"], width=row["width"], prompt_len=row["prompt_len"], length=row["length"],
            alpha=fit.alpha if fitted else None, ci=list(fit.ci) if fitted and fit.ci else None,
            t_range=list(fit.t_range) if fitted else None,
            seed_range=[min(seeds), max(seeds)] if seeds else None,
            relay=row["relay_alpha"][-1], relay_no_residual=row["relay_alpha_no_residual"][-1],
        ))
    return rows


def depth_differences(folder: Path, summary: dict, shared: dict) -> list[dict]:
    """For each (width, prompt length, length) and each two neighbouring depths: the last layer's
    alpha of the shallower model minus the deeper one's, one paired interval on the difference (every
    cell of a grid measures the same pairs from the same seeds, in the same order: whole seeds
    resampled alike for both; ``fit.paired_alpha_difference``)."""
    groups: dict[tuple, list[dict]] = {}
    for row in summary["rows"]:
        groups.setdefault((row["width"], row["prompt_len"], row["length"]), []).append(row)
    out = []
    for (width, prompt_len, length), rows in groups.items():
        curves = []
        for row in sorted(rows, key=lambda r: r["depth"]):
            with np.load(folder / "cells" / f"{row['key']}.npz") as data:
                seeds, pairs = data["l2"].shape[:2]
                curves.append((row["depth"], data["t"], data["l2"][:, :, -1].reshape(seeds * pairs, -1), data["floor"][-1],
                               np.repeat(np.arange(seeds), pairs)))
        for (d1, t, a, floor_a, groups), (d2, _, b, floor_b, _) in zip(curves, curves[1:]):
            entry = dict(width=width, prompt_len=prompt_len, length=length, depths=[d1, d2])
            entry.update(paired_difference_or_refuse(t, a, b, t_min=shared["fit_t_min"], floor_a=floor_a, floor_b=floor_b,
                                                     groups=groups, n_boot=shared["n_boot"]).to_dict())
            out.append(entry)
    return out


class Summary(PartSummary):
    """What ``run`` saves in summary.json and the claims read (``claims.check_summary``):
    ``depth_differences`` are ``AlphaDifference`` (or ``FitRefused``) records, each with its prompt
    length and its two depths."""

    depth_prompt: list[Cell]
    depth_differences: list[Record]
    lengths: NotRequired[list[Cell]]


def run(profile: str, out: Path, seed: int = 0, settings: dict | None = None) -> Summary:
    del seed  # the grids name their seeds
    p = dict(PROFILES[profile], **(settings or {}))
    result = Summary(profile=profile, settings=p)
    for name in ("depth_prompt", "lengths"):
        grid = nh.SweepGrid(**p[name], **p["shared"])
        print(f"{name}: {len(grid.cells())} cells of {len(grid.seeds)} seeds x {grid.n_pairs} pairs", flush=True)
        summary = nh.run_sweep(grid, out / name)
        print(sweep_table(summary), flush=True)
        result[name] = _last_layer_rows(summary)
    result["depth_differences"] = depth_differences(out / "depth_prompt", load_json(out / "depth_prompt" / "summary.json"),
                                                    p["shared"])
    save_json(out / "summary.json", result)
    return result


# ---------------------------------------------------------------- the claims this part measures


def _depth(summary: Summary):
    sweep = summary
    saved = sweep.get("depth_differences", [])
    diffs = criteria.read_differences(saved)  # each record also names its prompt length and its two depths
    if not diffs or not criteria.all_with_interval(diffs):
        return criteria.unmeasured("needs two depths with a fitted difference at every prompt length", errors=criteria.refusals(diffs))
    text = "; ".join(f"P={r['prompt_len']}: L{r['depths'][0]} - L{r['depths'][1]} {d.difference:+.2f} "
                     f"[{d.ci[0]:+.2f}, {d.ci[1]:+.2f}]" for r, d in zip(saved, diffs))
    relay = "; ".join(f"P={r['prompt_len']} L{r['depth']}: relay {r['relay']:.2f}" for r in sweep["depth_prompt"])
    verdict, _, below = criteria.every_above_zero(diffs)
    return Judgement(f"last-layer alpha, shallower minus deeper: {text}; below 0 after a Bonferroni correction over "
                     f"{len(diffs)} differences: {len(below)}", None, verdict, dict(differences=saved, relay_alpha=relay))


CLAIMS = (
    Claim("deeper_remembers_longer", "Each layer of relay adds a log factor: deeper models forget more slowly "
          "(last layer, difference above 0 at each step in depth)", "alpha falls with depth L", ("depth_length_sweep",),
          "At every prompt length, the last layer's alpha of untrained models of neighbouring depths, shallower minus "
          f"deeper, with {criteria.PAIRED_CRITERION}. {criteria.ABOVE_ZERO_CRITERION}", _depth),
)


def main() -> None:
    args = parse_experiment_args(experiment_parser(__doc__, "depth_length_sweep", PROFILES, seed=False))
    run(args.profile, args.out)


if __name__ == "__main__":
    main()
