"""Sweeps: alpha over a grid of untrained architectures, every seed and pair in one program per shape.

A grid (``SweepGrid``) is the product of depths, widths, prompt lengths ``P``, continuation
lengths ``T``, position encodings and prompt-logit-bias strengths; every point of it is a cell
(``Cell``, one model shape). Within a cell all seeds and all pairs run through one compiled
program (``offsets.sweep_offsets``, through ``measurement.measure``): the per-seed parameters are stacked on a leading axis, the
(seed, pair) items are flattened onto one axis, that axis is sharded over every visible device
(a one-axis ``Mesh`` and ``shard_map``) and each device walks over its items with ``lax.map``,
vmapped ``batch_size`` at a time. No program is ever compiled per seed.

``run_sweep`` writes into one folder (layout in docs/sweeps.md):

    manifest.json          the grid and its cells' keys, written before any work
    cells/<key>.npz        one finished cell in ``Measurement.arrays``' layout: t, l2 [S, N, L+1, T], kl [S, N, T],
                           floor [L+1, T], ...; and the seeds
    cells/<key>.json       its fits (pooled over seeds and pairs, per seed) and the relay prediction
    summary.json           one row per cell of the grid, in grid order
    alpha_vs_depth.png, alpha_vs_prompt_len.png, offsets_vs_t.png   drawn from the files above

A cell's key hashes everything its numbers depend on (model config, seeds, pairs, fit and floor
settings), so an interrupted sweep resumes where it stopped (a cell is finished once its json
exists; both files are written atomically, npz first) and a changed setting never reuses a stale
cell. Execution settings (device count, ``batch_size``) are not in the key: they change rounding
only. Nor is the code: a change that alters what a cell measures must bump ``_CELL_FORMAT``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
import time
from pathlib import Path

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh
from matplotlib.figure import Figure
from tqdm.auto import tqdm

from nohair_jax import relay
from nohair_jax.checks import check_int, is_int
from nohair_jax.config import default_config
from nohair_jax.fit import PowerLawFit, alpha_table, alphas, fit_from_dict, fit_layers, fit_power_law, summary_curve
from nohair_jax.measurement import measure
from nohair_jax.model import POSITION_KINDS, PromptLogitBias, Transformer, TransformerConfig
from nohair_jax.offsets import continuation_positions, sweep_mesh
from nohair_jax.pairs import random_prompt_pairs
from nohair_jax.results import jsonable, load_json, save_figure, save_json, save_npz, written_together

__all__ = [
    "AXES", "Cell", "SweepGrid", "cell_config", "cell_key", "cell_models", "draw_sweep", "measure_cell", "relay_alphas", "run_sweep",
    "sweep_table",
]

AXES = ("depth", "width", "prompt_len", "length", "position", "logit_bias")
# The SweepGrid fields holding each axis's values, in the order of AXES, and the axes' names in figures.
_AXIS_FIELDS = ("depths", "widths", "prompt_lens", "lengths", "positions", "logit_bias")
_AXIS_NAMES = dict(depth="L", width="d_model", prompt_len="P", length="T", position="positions", logit_bias="logit bias")
# Bump when what a cell file means changes, so old cells are not mistaken for new ones.
_CELL_FORMAT = 1


@dataclasses.dataclass(frozen=True)
class Cell:
    """One model shape of a sweep. ``logit_bias`` is the prompt logit bias's gamma (0: no bias)."""

    depth: int
    width: int
    prompt_len: int
    length: int
    position: str
    logit_bias: float

    def label(self) -> str:
        bias = f", logit bias {self.logit_bias:g}" if self.logit_bias else ""
        return f"L={self.depth} d={self.width} P={self.prompt_len} T={self.length} {self.position}{bias}"


@dataclasses.dataclass(frozen=True)
class SweepGrid:
    """The axes of a sweep (tuples; their product is the list of cells) and the settings every cell shares.

    Models are ``config.default_config``: pre-LN, GELU, one head per 32 features, GPT-2 init.
    ``logit_bias`` holds gammas of the dilution-cancelling prompt logit bias, 0 for none (linear
    biases are not an axis: they are zero at init, so on/off would measure the same model twice).
    Every seed sees the same ``n_pairs`` random-token pairs (drawn from ``pair_seed``); the noise
    floor is measured against float64 on seed ``seeds[0]``'s first ``floor_pairs`` pairs; fits
    start at ``fit_t_min`` with ``n_boot`` bootstrap resamples over all (seed, pair) curves.
    """

    depths: tuple[int, ...] = (1, 2, 4)
    widths: tuple[int, ...] = (128,)
    prompt_lens: tuple[int, ...] = (16,)
    lengths: tuple[int, ...] = (512,)
    positions: tuple[str, ...] = ("learned",)
    logit_bias: tuple[float, ...] = (0.0,)
    seeds: tuple[int, ...] = (0, 1, 2, 3)
    n_pairs: int = 8
    pair_seed: int = 1
    vocab_size: int = 256
    fit_t_min: int = 32
    n_boot: int = 1000
    floor_pairs: int = 2

    def __post_init__(self):
        for name in (*_AXIS_FIELDS, "seeds"):
            values = tuple(getattr(self, name))
            object.__setattr__(self, name, values)  # lists from JSON or a command line become hashable
            if not values or len(set(values)) != len(values):
                raise ValueError(f"SweepGrid.{name} must be non-empty without repeats, got {values}")
        for name in ("depths", "widths", "prompt_lens", "lengths"):
            if not all(is_int(v) and v >= 1 for v in getattr(self, name)):
                raise ValueError(f"SweepGrid.{name} must hold ints >= 1, got {getattr(self, name)}")
        if not all(is_int(s) for s in self.seeds):
            raise ValueError(f"SweepGrid.seeds must hold ints, got {self.seeds}")
        if bad := [p for p in self.positions if p not in POSITION_KINDS]:
            raise ValueError(f"unknown position encoding {bad[0]!r}; expected one of {POSITION_KINDS}")
        if not all(isinstance(g, (int, float)) and math.isfinite(g) and g >= 0 for g in self.logit_bias):
            raise ValueError(f"SweepGrid.logit_bias must hold finite gammas >= 0 (0: no bias), got {self.logit_bias}")
        for name in ("n_pairs", "vocab_size", "fit_t_min", "floor_pairs", "n_boot"):
            check_int(f"SweepGrid.{name}", getattr(self, name), low=int(name != "n_boot"))
        if self.fit_t_min >= min(self.lengths):
            raise ValueError(f"fit_t_min={self.fit_t_min} leaves no fit window at length {min(self.lengths)}")

    def cells(self) -> list[Cell]:
        """Every point of the grid, in product order of ``AXES``."""
        return [Cell(*values) for values in itertools.product(*(getattr(self, name) for name in _AXIS_FIELDS))]

    def fit_kwargs(self) -> dict:
        return dict(t_min=self.fit_t_min, n_boot=self.n_boot)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def cell_config(cell: Cell, grid: SweepGrid) -> TransformerConfig:
    """The architecture of the cell's models (``config.default_config``)."""
    bias = PromptLogitBias(cell.prompt_len, float(cell.logit_bias)) if cell.logit_bias else None
    return default_config(cell.depth, d_model=cell.width, max_len=cell.prompt_len + cell.length,
                            vocab_size=grid.vocab_size, position=cell.position, prompt_logit_bias=bias)


def cell_models(cell: Cell, grid: SweepGrid) -> list[Transformer]:
    """The cell's untrained model for every seed of the grid (identical to building each alone)."""
    return [Transformer(cell_config(cell, grid), rngs=nnx.Rngs(seed)) for seed in grid.seeds]


def cell_key(cell: Cell, grid: SweepGrid) -> str:
    """16 hex digits hashing everything a cell's numbers depend on (raises on an invalid model config)."""
    config = nnx.eval_shape(lambda: cell_models(cell, dataclasses.replace(grid, seeds=grid.seeds[:1]))[0]).config
    shared = {k: v for k, v in grid.to_dict().items() if k not in _AXIS_FIELDS}
    content = dict(format=_CELL_FORMAT, cell=dataclasses.asdict(cell), model=config.to_dict(), **shared)
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:16]


def relay_alphas(prompt_len: int, length: int, fits: list, *, residual: bool) -> list[float | None]:
    """Alpha of the linear relay model at every layer, fitted over the same window as each measured fit.

    ``fits``: one ``PowerLawFit`` or ``FitRefused`` per layer 1..L; a refused layer gets None.
    """
    curves = np.asarray(relay.offsets(prompt_len, length, len(fits), residual=residual))
    t = continuation_positions(length)
    return [
        fit_power_law(t, curves[layer], t_min=fit.t_range[0], t_max=fit.t_range[1], n_boot=0).alpha
        if isinstance(fit, PowerLawFit) else None
        for layer, fit in enumerate(fits, start=1)
    ]


def measure_cell(cell: Cell, grid: SweepGrid, *, mesh: Mesh | None = None, batch_size: int = 1) -> tuple[dict, dict]:
    """Measure one cell: (arrays for its npz, record for its json). Nothing is written here."""
    start = time.perf_counter()
    pairs = random_prompt_pairs(grid.pair_seed, grid.n_pairs, cell.prompt_len, cell.length, grid.vocab_size)
    m = measure(cell_models(cell, grid), pairs, floor_pairs=grid.floor_pairs, fit_kwargs=grid.fit_kwargs(),
                mesh=sweep_mesh() if mesh is None else mesh, batch_size=batch_size)
    seed_fits = [fit_layers(m.offsets.t, seed_l2, m.floor, **{**grid.fit_kwargs(), "n_boot": 0})
                 for seed_l2 in m.per_model(m.offsets.l2)]
    record = dict(
        **dataclasses.asdict(cell),
        model=m.config.to_dict(),
        fits=[fit.to_dict() for fit in m.fits],
        seed_alpha=[alphas(per_layer) for per_layer in seed_fits],
        relay_alpha=relay_alphas(cell.prompt_len, cell.length, m.fits, residual=True),
        relay_alpha_no_residual=relay_alphas(cell.prompt_len, cell.length, m.fits, residual=False),
        seconds=time.perf_counter() - start,
    )
    return {**m.arrays(), "seeds": np.asarray(grid.seeds)}, record


def run_sweep(grid: SweepGrid, out: str | Path, *, mesh: Mesh | None = None, batch_size: int = 1,
              progress: bool = True) -> dict:
    """Measure every cell of ``grid`` not yet finished in ``out``, then write summary.json and the figures.

    Every cell's key is computed (and its config validated) before anything is written, so a bad
    grid leaves no files. Cells are saved as they finish; rerunning after an interruption skips
    them. With several processes (``jax.distributed``) every process computes and process 0 writes:
    ``out`` must then be one shared folder. ``mesh``: the devices seeds and pairs are sharded over
    (default ``sweep_mesh()``, every visible device); ``batch_size``: (seed, pair) items vmapped
    together per device; ``progress``: a bar over cells. Returns the contents of summary.json.
    """
    out = Path(out)
    cells = grid.cells()
    keys = [cell_key(cell, grid) for cell in cells]
    writer = jax.process_index() == 0
    if writer:
        listed = [dict(key=key, **dataclasses.asdict(cell)) for cell, key in zip(cells, keys)]
        save_json(out / "manifest.json", dict(grid=grid.to_dict(), cells=listed))
    rows = []
    bar = tqdm(list(zip(cells, keys)), desc="sweep", unit="cell", disable=not progress)
    for cell, key in bar:
        bar.set_postfix_str(cell.label())
        done = out / "cells" / f"{key}.json"
        if done.exists():
            record = load_json(done)
        else:
            arrays, record = measure_cell(cell, grid, mesh=mesh, batch_size=batch_size)
            if writer:
                save_npz(done.with_suffix(".npz"), **arrays)  # npz first: a json means both are whole
                save_json(done, record)
        rows.append(dict(key=key, **record))
    summary = dict(grid=grid.to_dict(), rows=[{k: v for k, v in row.items() if k != "model"} for row in rows])
    if writer:
        with written_together():  # the summary and its figures replace an earlier set together, or none does
            save_json(out / "summary.json", summary)
            _save_figures(out, jsonable(summary))
    return summary


def sweep_table(summary: dict) -> str:
    """Last-layer alpha of every cell of a summary.json: pooled fit with its interval, the range
    over seeds, and the relay model's alpha over the same window."""
    lines = [
        "\nalpha at the last layer (pooled over seeds and pairs, bootstrap interval; range of per-seed fits; relay model)",
        f"{'cell':<40}  {'alpha':>6}  {'interval':>15}  {'seeds':>13}  {'relay':>6}  {'window t':>10}",
    ]
    for row in summary["rows"]:
        alpha, lo, hi = _last_layer(row)
        seeds = [a[-1] for a in row["seed_alpha"] if a[-1] is not None]
        spread = f"{min(seeds):.3f}-{max(seeds):.3f}" if seeds else "-"
        fit, predicted = fit_from_dict(row["fits"][-1]), row["relay_alpha"][-1]
        window = f"{fit.t_range[0]}-{fit.t_range[1]}" if isinstance(fit, PowerLawFit) else "no fit"
        relay_text = "-" if predicted is None else f"{predicted:.3f}"
        lines.append(f"{Cell(*(row[a] for a in AXES)).label():<40}  {alpha:6.3f}  [{lo:6.3f}, {hi:6.3f}]  "
                     f"{spread:>13}  {relay_text:>6}  {window:>10}")
    return "\n".join(lines)


def _last_layer(row: dict) -> tuple[float, float, float]:
    """(alpha, lower, upper) of the last layer's pooled fit; nan where it was refused or has no interval."""
    return tuple(alpha_table([fit_from_dict(row["fits"][-1])])[0])


def _varying_label(row: dict, rows: list[dict], leave_out: str | None = None) -> str:
    """``row``'s values on the axes that vary among ``rows`` (but ``leave_out``), as a legend label."""
    varying = [a for a in AXES if a != leave_out and len({r[a] for r in rows}) > 1]
    return ", ".join(f"{_AXIS_NAMES[a]} = {row[a]}" for a in varying) or "measured"


def _series(rows: list[dict], x_axis: str) -> dict[str, list[dict]]:
    """Rows grouped by every varying axis but ``x_axis`` (the label names those axes), sorted along it."""
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(_varying_label(row, rows, x_axis), []).append(row)
    return {label: sorted(group, key=lambda r: r[x_axis]) for label, group in groups.items()}


def _alpha_figure(rows: list[dict], x_axis: str, xlabel: str, title: str) -> Figure:
    """Last-layer alpha against one axis with its bootstrap interval; the relay model's alpha over
    the same window dashed (with residual) and dotted (without) in the same colour."""
    fig = Figure(figsize=(6.4, 4.4))
    ax = fig.subplots()
    for i, (label, group) in enumerate(_series(rows, x_axis).items()):
        x = [r[x_axis] for r in group]
        alpha, lo, hi = np.array([_last_layer(r) for r in group]).T
        ax.errorbar(x, alpha, yerr=[alpha - lo, hi - alpha], marker="o", capsize=3, color=f"C{i % 10}", label=label)
        for key, style in (("relay_alpha", "--"), ("relay_alpha_no_residual", ":")):
            ax.plot(x, [np.nan if r[key][-1] is None else r[key][-1] for r in group], style, color=f"C{i % 10}", lw=1)
    ax.plot([], [], "k--", lw=1, label="relay model, residual")
    ax.plot([], [], "k:", lw=1, label="relay model, no residual")
    ax.set(xlabel=xlabel, ylabel="alpha at the last layer", title=title)
    if x_axis == "prompt_len":
        ax.set_xscale("log", base=2)
    ticks = sorted({r[x_axis] for r in rows})
    ax.set_xticks(ticks, [str(x) for x in ticks])
    ax.minorticks_off()
    ax.legend(fontsize=7)
    return fig


def _offsets_figure(cells_dir: Path, rows: list[dict], title: str) -> Figure:
    """The last layer's mean offset (over seeds and pairs) against t, one curve per cell."""
    fig = Figure(figsize=(6.4, 4.4))
    ax = fig.subplots()
    for i, row in enumerate(rows):
        with np.load(cells_dir / f"{row['key']}.npz") as data:
            l2, t = data["l2"][:, :, -1], data["t"]  # [S, N, T], [T]
        label = f"{_varying_label(row, rows)}: alpha {_last_layer(row)[0]:.2f}"
        ax.loglog(t, summary_curve(l2.reshape(-1, t.size)), color=f"C{i % 10}", lw=1, label=label)
    ax.set(xlabel="continuation position t", ylabel="offset at the last layer (mean over seeds and pairs)", title=title)
    ax.legend(fontsize=7)
    return fig


def draw_sweep(out: str | Path) -> list[Path]:
    """Draw the three figures of the sweep folder ``out`` from summary.json and the cells' npz files."""
    return _save_figures(Path(out), load_json(Path(out) / "summary.json"))


def _save_figures(out: Path, saved: dict) -> list[Path]:
    """The sweep's three figures from the contents of its summary.json and the cells' npz files."""
    rows, grid = saved["rows"], saved["grid"]
    pooled = f"{len(grid['seeds'])} seeds x {grid['n_pairs']} pairs"
    return [
        save_figure(out / "alpha_vs_depth.png", _alpha_figure(rows, "depth", "depth L", f"alpha against depth ({pooled})")),
        save_figure(out / "alpha_vs_prompt_len.png",
                    _alpha_figure(rows, "prompt_len", "prompt length P", f"alpha against prompt length ({pooled})")),
        save_figure(out / "offsets_vs_t.png", _offsets_figure(out / "cells", rows, f"offsets against t ({pooled})")),
    ]
