"""Alpha against depth and prompt length, over seeds, beside the relay model's prediction.

Two sweeps of untrained models (pre-LN, learned positions, GPT-2 init; ``nohair_jax.sweep``):

1. ``depth_prompt/``: depths x prompt lengths P at one continuation length T. The relay model
   (DESIGN.md section 3) predicts that alpha falls with depth (one log factor per layer) and
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

import nohair_jax as nh
from nohair_jax.results import experiment_parser, save_json
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


def _last_layer_rows(summary: dict) -> list[dict]:
    """One line per cell: its axes, last-layer alpha with interval, per-seed range, relay alpha."""
    rows = []
    for row in summary["rows"]:
        fit = row["fits"][-1]
        seeds = [a[-1] for a in row["seed_alpha"] if a[-1] is not None]
        rows.append(dict(
            depth=row["depth"], width=row["width"], prompt_len=row["prompt_len"], length=row["length"],
            alpha=fit.get("alpha"), ci=fit.get("ci"), t_range=fit.get("t_range"),
            seed_range=[min(seeds), max(seeds)] if seeds else None,
            relay=row["relay_alpha"][-1], relay_no_residual=row["relay_alpha_no_residual"][-1],
        ))
    return rows


def run(profile: str, out: Path, seed: int = 0, settings: dict | None = None) -> dict:
    del seed  # the grids name their seeds
    p = dict(PROFILES[profile], **(settings or {}))
    result = dict(profile=profile, settings=p)
    for name in ("depth_prompt", "lengths"):
        grid = nh.SweepGrid(**p[name], **p["shared"])
        print(f"{name}: {len(grid.cells())} cells of {len(grid.seeds)} seeds x {grid.n_pairs} pairs", flush=True)
        summary = nh.run_sweep(grid, out / name)
        print(sweep_table(summary), flush=True)
        result[name] = _last_layer_rows(summary)
    save_json(out / "summary.json", result)
    return result


def main() -> None:
    parser = experiment_parser(__doc__, "depth_length_sweep", PROFILES, seed=False)
    args = parser.parse_args()
    run(args.profile, args.out)


if __name__ == "__main__":
    main()
