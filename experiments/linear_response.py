"""Linear response: the prompt's influence through the Jacobian, beside the finite offsets (the project's own measurement).

On the same held-out text pairs, for each model: the finite prompt-pair offsets (``nh.measure``:
float32 noise floor, fits per layer) and the linear response (``nohair_jax.jacobian``,
docs/definitions.md#linear-response): ``||J_l(t) (E_b - E_a)||``, the first-order term of the
offset, and the Jacobian's Frobenius norm ``||J_l(t)||_F``, fitted per layer the same way (a
tangent has no noise floor). Per layer: the Jacobian's alpha minus the finite one on a common
window, one paired interval (both are measured on the same pairs, resampled together:
``fit.paired_alpha_difference``), and the ratio finite / along-pair against t, which is 1 where the
offset is in the linear regime (``response_row``).

This part measures the project's baseline (pre-LN, RoPE, the architecture contrasts' quick size) at
init over seeds and after a short training. SmolLM2-135M-Instruct and its config at init are
measured the same way by the real model's part (``real_model.py``), on the pairs whose finite offsets
it measures anyway. Related work reports Jacobian token influence in Pythia and Qwen2.5 decaying
with alpha about 0.7 to 0.9 and absent at random init; the claims rows judge both.

    python experiments/linear_response.py --out results/linear_response            # quick, about 2 min on 2 cores
    python experiments/linear_response.py --profile full --out results/linear_response

Writes, per model (and seed), ``<model>/`` (the measurement layout: offsets.npz and fit.json) with
``response.npz`` (along_pair, frobenius [n_pairs, L+1, T]); per row ``<model>/ratio.npz`` (t, the
finite / along-pair ratio [L, T], geometric mean over the pooled pairs); ``summary.json`` and
``linear_response.png``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import NotRequired, TypedDict

import chex
import numpy as np
from flax import nnx
from matplotlib.figure import Figure
from tqdm.auto import tqdm

import nohair_jax as nh
from nohair_jax.parts import Part
from nohair_jax.claims import Record
from nohair_jax.config import default_config
from nohair_jax.fit import paired_difference_or_refuse
from nohair_jax.experiments import script_main, short_training, write_summary
from nohair_jax.figures import drawn_layers, layer_colors
from nohair_jax.jacobian import LinearResponse, linear_response
from nohair_jax.results import load_json, save_figure, save_npz

PROFILES = {
    "smoke": dict(d_model=32, depth=2, init_seeds=(0,), steps=10, batch_size=2, context=48, length=96, prompt_len=4,
                  n_pairs=2, n_random=2, t_min=8, n_boot=100),
    "quick": dict(d_model=64, depth=3, init_seeds=(0, 1, 2), steps=200, batch_size=8, context=128, length=1024,
                  prompt_len=16, n_pairs=8, n_random=2, t_min=32, n_boot=1000),
    "full": dict(d_model=128, depth=4, init_seeds=(0, 1, 2, 3, 4), steps=1500, batch_size=16, context=256,
                 length=4096, prompt_len=16, n_pairs=32, n_random=4, t_min=32, n_boot=1000),
}

PART = Part(order=15,
            title="Linear response: the Jacobian beside the finite offsets (the project's own measurement)",
            figures=("linear_response.png",),
            about="The norm of the Jacobian of every layer's hidden state at t with respect to the prompt's "
                  "embeddings (along the pair's difference and its Frobenius norm), beside the finite offsets on the "
                  "same pairs: the project's model at init and trained (SmolLM2 and its config at init: the real "
                  "model's part, on its pairs).",
            # No row judges it: 110 s of the main job at its own quick profile (3 seeds, 8 pairs, 200 steps).
            quick=("quick", dict(init_seeds=(0,), n_pairs=4, steps=100)),
            full=("quick", {}), seconds=70)

MODELS = ("own init", "own trained")  # the summary's rows, in order
RATIO_T = (1, 4, 16, 64, 256)  # the t at which the summary keeps the finite / linear ratio (and the last t)


def _folder(name: str, seed: int | None = None) -> str:
    return name.lower().replace(" ", "_") + ("" if seed is None else f"_seed{seed}")


def _measure(name: str, models: dict, pairs: nh.PromptPairs, p: dict, out: Path) -> dict:
    """One row: ``models`` {seed or None: model} of one config measured on ``pairs``, pooled over seeds."""
    fits = dict(t_min=p["t_min"], n_boot=p["n_boot"])
    measured, responses = [], []
    for seed, model in models.items():
        m = nh.measure(model, pairs, fit_kwargs=fits, progress=True)
        # No offsets.png per model: linear_response.png draws what this part compares (draw_offsets on request).
        m.save(out / _folder(name, seed), meta=dict(experiment="linear_response", model=name, seed=seed), figure=False)
        responses.append(response(model, pairs, p["n_random"], out / _folder(name, seed)))
        measured.append(m)
    pooled = nh.pool(measured, **fits)  # intervals resample seeds, then pairs within them
    return dict(seeds=[s for s in models if s is not None],
                **response_row(pooled.t, pooled.l2, pooled.floor, pooled.groups, responses, fits, out / _folder(name)))


def response(model, pairs: nh.PromptPairs, n_random: int, folder: Path) -> LinearResponse:
    """``linear_response`` of ``model`` on ``pairs``, saved as ``folder / response.npz``."""
    r = linear_response(model, *pairs, n_random=n_random, progress=True)
    save_npz(folder / "response.npz", along_pair=r.along_pair, frobenius=r.frobenius)
    return r


class ResponseRow(TypedDict):
    """One model row of the comparison (``response_row``): per layer, fits of the finite offsets, of the
    Jacobian along the pair's difference and of its Frobenius norm, and each Jacobian minus the finite
    offsets (``PowerLawFit`` / ``AlphaDifference`` records, or ``FitRefused``'s); ``seeds`` where the
    models are fresh initialisations."""

    n_pairs: int
    finite: list[Record]
    frobenius: list[Record]
    frobenius_minus_finite: list[Record]
    seeds: NotRequired[list[int]]
    n_layers: NotRequired[int]
    along_pair: NotRequired[list[Record]]
    along_minus_finite: NotRequired[list[Record]]
    ratio_t: NotRequired[list[int]]
    ratio: NotRequired[list[list[float]]]


def response_row(t, finite, floor, groups, responses: list[LinearResponse], fits: dict, folder: Path) -> ResponseRow:
    """The comparison of one model row: the finite offsets ``finite`` [n_pairs, L+1, T] (their noise
    floor [L+1, T] and ``groups``, the seed of each pair, or None) beside the ``responses`` of the same
    pairs in order, fitted per layer with ``fits``, each Jacobian minus the finite offsets with a paired
    interval; the finite / along-pair ratio saved as ``folder / ratio.npz`` (the real model's part builds
    its rows with this too)."""
    along = np.concatenate([r.along_pair for r in responses])
    frobenius = np.concatenate([r.frobenius for r in responses])
    chex.assert_equal_shape([finite, along])
    layers = range(1, along.shape[1])

    def minus_finite(resp):
        return [paired_difference_or_refuse(t, resp[:, layer], finite[:, layer], floor_b=floor[layer], groups=groups,
                                            **fits).to_dict() for layer in layers]

    # finite / along-pair per pair, then its geometric mean over pairs: [L+1, T] (1 in the linear regime)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.exp(np.mean(np.log(finite[:, 1:] / along[:, 1:]), axis=0))
    at = [k - 1 for k in (*RATIO_T, t[-1]) if k <= t[-1]]
    save_npz(folder / "ratio.npz", t=t, ratio=ratio)
    return ResponseRow(n_pairs=int(along.shape[0]), n_layers=along.shape[1] - 1,
                finite=[f.to_dict() for f in nh.fit_layers(t, finite, floor, groups=groups, **fits)],
                along_pair=[f.to_dict() for f in nh.fit_layers(t, along, groups=groups, **fits)],
                frobenius=[f.to_dict() for f in nh.fit_layers(t, frobenius, groups=groups, **fits)],
                along_minus_finite=minus_finite(along), frobenius_minus_finite=minus_finite(frobenius),
                ratio_t=[int(t[k]) for k in at], ratio=ratio[:, at].tolist())


def run(profile: str, out: Path, settings: dict | None = None) -> dict:
    p = dict(PROFILES[profile], **(settings or {}))
    p["init_seeds"] = tuple(p["init_seeds"])
    start = time.perf_counter()
    corpus = nh.stdlib_corpus()
    pairs = nh.heldout_prompt_pairs(corpus, 1, p["n_pairs"], p["prompt_len"], p["length"])
    cfg = default_config(p["depth"], d_model=p["d_model"], position="rope", max_len=p["prompt_len"] + p["length"])
    plan = {
        "own init": lambda: {s: nh.Transformer(cfg, rngs=nnx.Rngs(s)) for s in p["init_seeds"]},
        "own trained": lambda: {None: short_training(cfg, corpus, p, out / "own_trained").model},
    }
    rows = {name: _measure(name, plan[name](), pairs, p, out) for name in tqdm(MODELS, desc="linear response", unit="model")}
    summary = dict(profile=profile, settings=p, own_model=cfg.to_dict(), corpus=corpus.to_dict(), models=rows,
                   wall_s=time.perf_counter() - start)
    return write_summary(out, summary, draw)


def table(summary: dict) -> str:
    lines = []
    for name, row in summary["models"].items():
        layers = drawn_layers(row["n_layers"], most=6)
        lines.append(f"{name} ({row['n_pairs']} pairs" + (f", seeds {row['seeds']})" if row["seeds"] else ")"))
        for key in ("finite", "along_pair", "frobenius"):
            fits = [nh.fit_from_dict(row[key][k - 1]) for k in layers]
            lines.append(f"  {key:<11} layers {layers}: " + "; ".join(f.brief() for f in fits))
        diff = nh.fit_from_dict(row["frobenius_minus_finite"][-1])
        lines.append(f"  last layer, Jacobian minus finite: {diff.brief()}")
    return "\n".join(lines)


def _alphas(ax, fits: list[dict], x_shift: float, color, label: str, marker: str) -> None:
    table = nh.alpha_table([nh.fit_from_dict(f) for f in fits])
    x = np.arange(1, len(fits) + 1) + x_shift
    ax.errorbar(x, table[:, 0], yerr=np.abs(table[:, 1:].T - table[:, 0]), fmt=marker, color=color, ms=4, lw=1,
                label=label)


def draw_rows(path: Path, rows: dict, trained: Path, family: str, title: str) -> None:
    """One model family's figure (this part's and the real model's ``linear_response.png``): alpha per
    layer of the finite offsets and of the Jacobian (Frobenius), trained and init (``rows``: "trained"
    and "init" -> ``response_row``); the trained model's last layer, its three curves against t; the
    ratio finite / along-pair against t for every layer, coloured by depth. ``trained``: the folder
    holding the trained row's offsets.npz, response.npz and ratio.npz."""
    fig = Figure(figsize=(16, 4.8))
    ax_alpha, ax_curves, ax_ratio = fig.subplots(1, 3)
    for k, when in enumerate(("trained", "init")):
        row = rows[when]
        _alphas(ax_alpha, row["finite"], -0.15 + 0.3 * k, f"C{2 * k}", f"{when}: finite offsets", "o")
        _alphas(ax_alpha, row["frobenius"], -0.05 + 0.3 * k, f"C{2 * k + 1}", f"{when}: Jacobian (Frobenius)", "s")
    ax_alpha.axhline(0, color="0.7", lw=0.8)
    n_layers = rows["trained"]["n_layers"]
    ax_alpha.set(xlabel="layer", ylabel="alpha (95 % interval)", title=f"{family}: alpha per layer",
                 xticks=drawn_layers(n_layers, most=10))
    ax_alpha.legend(fontsize=7)
    with np.load(trained / "offsets.npz") as off, np.load(trained / "response.npz") as resp:
        for key, curves, style in (("finite offset", off["l2"], "-"), ("along the pair", resp["along_pair"], "--"),
                                   ("Frobenius", resp["frobenius"], ":")):
            ax_curves.loglog(off["t"], nh.summary_curve(curves[: resp["along_pair"].shape[0], -1]), style, color="k",
                             lw=1.2, label=key)
    ax_curves.set(xlabel="t", ylabel="last layer (mean over pairs)", title=f"{family} trained: last layer")
    ax_curves.legend(fontsize=7)
    with np.load(trained / "ratio.npz") as data:
        colors = layer_colors(n_layers)
        for layer in range(1, n_layers + 1):
            ax_ratio.loglog(data["t"], data["ratio"][layer - 1], color=colors[layer], lw=0.8,
                            label=f"layer {layer}" if layer in drawn_layers(n_layers) else None)
    ax_ratio.axhline(1, color="0.5", lw=0.8)
    ax_ratio.set(xlabel="t", ylabel="finite / along-pair (geometric mean)", title=f"{family} trained: 1 = linear regime")
    ax_ratio.legend(fontsize=6, ncol=2)
    fig.suptitle(title)
    fig.tight_layout()
    save_figure(path, fig)


def draw(out: Path) -> None:
    """linear_response.png (``draw_rows``) of the project's model."""
    summary = load_json(out / "summary.json")
    p, rows = summary["settings"], summary["models"]
    draw_rows(out / "linear_response.png", dict(trained=rows["own trained"], init=rows["own init"]),
              out / _folder("own trained"), "own model",
              f"linear response beside the finite offsets: held-out text pairs, P = {p['prompt_len']}, T = {p['length']}, "
              f"{p['depth']} layers, d_model {p['d_model']}, {p['steps']} training steps")


def main() -> None:
    script_main(__doc__, "linear_response", PROFILES, run, table)


if __name__ == "__main__":
    main()
