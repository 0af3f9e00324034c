"""Linear response: the prompt's influence through the Jacobian, beside the finite offsets (the project's own measurement).

On the same held-out text pairs, for each model: the finite prompt-pair offsets (``nh.measure``:
float32 noise floor, fits per layer) and the linear response (``nohair_jax.linear_response``,
docs/definitions.md#linear-response): ``||J_l(t) (E_b - E_a)||``, the first-order term of the
offset, and the Jacobian's Frobenius norm ``||J_l(t)||_F``, fitted per layer the same way (a
tangent has no noise floor). Per layer: the Jacobian's alpha minus the finite one on a common
window, one interval (the two sides resampled independently, although they share pairs: a
conservative interval), and the ratio finite / along-pair against t, which is 1 where the offset
is in the linear regime.

Models: the project's baseline (pre-LN, RoPE, the architecture contrasts' quick size) at init over
seeds and after a short training; SmolLM2-135M-Instruct (the packaged real model) and its exact
config at init over seeds. Related work reports Jacobian token influence in Pythia and Qwen2.5
decaying with alpha about 0.7 to 0.9 and absent at random init; the claims rows judge both.

    python experiments/linear_response.py --out results/linear_response            # quick, about 6 min on 2 cores
    python experiments/linear_response.py --profile full --out results/linear_response

Writes, per model (and seed), ``<model>/`` (the measurement layout: offsets.npz and fit.json) with
``response.npz`` (along_pair, frobenius [n_pairs, L+1, T]); per row ``<model>/ratio.npz`` (t, the
finite / along-pair ratio [L, T], geometric mean over the pooled pairs); ``summary.json`` and
``linear_response.png``.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from flax import nnx
from matplotlib.figure import Figure
from tqdm.auto import tqdm

import nohair_jax as nh
from nohair_jax.config import default_config
from nohair_jax.experiments import (REAL_MODEL, first_layers, heldout_text_tokens, real_model_at_init,
                                    real_model_available, script_main, short_training)
from nohair_jax.figures import drawn_layers, layer_colors
from nohair_jax.linear_response import linear_response
from nohair_jax.results import load_json, save_figure, save_json, save_npz

PROFILES = {
    "smoke": dict(d_model=32, depth=2, init_seeds=(0,), steps=10, batch_size=2, context=48, own_length=96,
                  real_layers=2, real_length=64, real_init_seeds=(0,), prompt_len=4, n_pairs=2, n_random=2, t_min=8,
                  n_boot=100),
    "quick": dict(d_model=64, depth=3, init_seeds=(0, 1, 2), steps=200, batch_size=8, context=128, own_length=1024,
                  real_layers=None, real_length=512, real_init_seeds=(0, 1, 2), prompt_len=16, n_pairs=8, n_random=2,
                  t_min=32, n_boot=1000),
    "full": dict(d_model=128, depth=4, init_seeds=(0, 1, 2, 3, 4), steps=1500, batch_size=16, context=256,
                 own_length=4096, real_layers=None, real_length=2048, real_init_seeds=(0, 1, 2), prompt_len=16,
                 n_pairs=32, n_random=4, t_min=32, n_boot=1000),
}
MODELS = ("own init", "own trained", "SmolLM2 trained", "SmolLM2 init")  # the summary's rows, in order
RATIO_T = (1, 4, 16, 64, 256)  # the t at which the summary keeps the finite / linear ratio (and the last t)
available = real_model_available  # reproduce skips the part where this says why


def _folder(name: str, seed: int | None = None) -> str:
    return name.lower().replace(" ", "_") + ("" if seed is None else f"_seed{seed}")


def _measure(name: str, models: dict, pairs: nh.PromptPairs, p: dict, out: Path, how: dict) -> dict:
    """One row: ``models`` {seed or None: model} of one config measured on ``pairs``, pooled over seeds."""
    fits = dict(t_min=p["t_min"], n_boot=p["n_boot"])
    measured, along, frobenius = [], [], []
    for seed, model in models.items():
        m = nh.measure(model, pairs, fit_kwargs=fits, progress=True, **how)
        # No offsets.png per model: linear_response.png draws what this part compares (draw_offsets on request).
        m.save(out / _folder(name, seed), meta=dict(experiment="linear_response", model=name, seed=seed), figure=False)
        r = linear_response(model, *pairs, n_random=p["n_random"], progress=True)
        save_npz(out / _folder(name, seed) / "response.npz", along_pair=r.along_pair, frobenius=r.frobenius)
        measured.append(m)
        along.append(r.along_pair)
        frobenius.append(r.frobenius)
    pooled = nh.pool(measured, **fits)  # intervals resample seeds, then pairs within them
    t, groups, along, frobenius = pooled.t, pooled.groups, np.concatenate(along), np.concatenate(frobenius)
    layers = range(1, along.shape[1])

    def minus_finite(response):
        return [nh.difference_or_refuse(t, response[:, layer], pooled.l2[:, layer], floor_b=pooled.floor[layer],
                                        groups_a=groups, groups_b=groups, **fits).to_dict() for layer in layers]

    # finite / along-pair per pair, then its geometric mean over pairs: [L+1, T] (1 in the linear regime)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.exp(np.mean(np.log(pooled.l2[:, 1:] / along[:, 1:]), axis=0))
    at = [k - 1 for k in (*RATIO_T, t[-1]) if k <= t[-1]]
    save_npz(out / _folder(name) / "ratio.npz", t=t, ratio=ratio)
    return dict(seeds=[s for s in models if s is not None], n_pairs=int(along.shape[0]), n_layers=along.shape[1] - 1,
                finite=[f.to_dict() for f in pooled.fits],
                along_pair=[f.to_dict() for f in nh.fit_layers(t, along, groups=groups, **fits)],
                frobenius=[f.to_dict() for f in nh.fit_layers(t, frobenius, groups=groups, **fits)],
                along_minus_finite=minus_finite(along), frobenius_minus_finite=minus_finite(frobenius),
                ratio_t=[int(t[k]) for k in at], ratio=ratio[:, at].tolist())


def run(profile: str, out: Path, settings: dict | None = None) -> dict:
    p = dict(PROFILES[profile], **(settings or {}))
    p["init_seeds"], p["real_init_seeds"] = tuple(p["init_seeds"]), tuple(p["real_init_seeds"])
    start = time.perf_counter()
    corpus = nh.stdlib_corpus()
    own_pairs = nh.heldout_prompt_pairs(corpus, 1, p["n_pairs"], p["prompt_len"], p["own_length"])
    cfg = default_config(p["depth"], d_model=p["d_model"], position="rope", max_len=p["prompt_len"] + p["own_length"])
    real, tokenizer = nh.load_checkpoint(REAL_MODEL)
    real = first_layers(real, p["real_layers"])
    real_pairs = nh.text_prompt_pairs(heldout_text_tokens(tokenizer), 1, p["n_pairs"], p["prompt_len"], p["real_length"])
    # The real model's vocabulary projection (49152 x 576 per token) at the log-spaced t only: nothing here reads the KL.
    real_how = dict(floor_pairs=1, kl_positions="log")
    plan = {
        "own init": lambda: ({s: nh.Transformer(cfg, rngs=nnx.Rngs(s)) for s in p["init_seeds"]}, own_pairs, {}),
        "own trained": lambda: ({None: short_training(cfg, corpus, p, out / "own_trained").model}, own_pairs, {}),
        "SmolLM2 trained": lambda: ({None: real}, real_pairs, real_how),
        "SmolLM2 init": lambda: ({s: real_model_at_init(real.config, s) for s in p["real_init_seeds"]},
                                 real_pairs, real_how),
    }
    rows = {}
    for name in tqdm(MODELS, desc="linear response", unit="model"):
        models, pairs, how = plan[name]()
        rows[name] = _measure(name, models, pairs, p, out, how)
    summary = dict(profile=profile, settings=p, own_model=cfg.to_dict(), real_model=real.config.to_dict(),
                   checkpoint=REAL_MODEL, corpus=corpus.to_dict(), models=rows, wall_s=time.perf_counter() - start)
    save_json(out / "summary.json", summary)
    draw(out)
    return summary


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


def draw(out: Path) -> None:
    """linear_response.png: per model family, alpha per layer of the finite offsets and of the
    Jacobian (init and trained); the last layer's three curves against t (trained); the ratio
    finite / along-pair against t for every layer of SmolLM2 (coloured by depth)."""
    summary = load_json(out / "summary.json")
    rows = summary["models"]
    fig = Figure(figsize=(20, 4.8))
    ax_own, ax_real, ax_curves, ax_ratio = fig.subplots(1, 4)
    for ax, family in ((ax_own, "own"), (ax_real, "SmolLM2")):
        for k, when in enumerate(("trained", "init")):
            row = rows[f"{family} {when}"]
            _alphas(ax, row["finite"], -0.15 + 0.3 * k, f"C{2 * k}", f"{when}: finite offsets", "o")
            _alphas(ax, row["frobenius"], -0.05 + 0.3 * k, f"C{2 * k + 1}", f"{when}: Jacobian (Frobenius)", "s")
        ax.axhline(0, color="0.7", lw=0.8)
        n_layers = rows[f"{family} trained"]["n_layers"]
        ax.set(xlabel="layer", ylabel="alpha (95 % interval)", title=f"{family}: alpha per layer",
               xticks=drawn_layers(n_layers, most=10))
        ax.legend(fontsize=7)
    row = rows["SmolLM2 trained"]
    with np.load(out / _folder("SmolLM2 trained") / "offsets.npz") as off, \
            np.load(out / _folder("SmolLM2 trained") / "response.npz") as resp:
        t = off["t"]
        for key, curves, style in (("finite offset", off["l2"], "-"), ("along the pair", resp["along_pair"], "--"),
                                   ("Frobenius", resp["frobenius"], ":")):
            ax_curves.loglog(t, nh.summary_curve(curves[:, -1]), style, color="k", lw=1.2, label=key)
    ax_curves.set(xlabel="t", ylabel="last layer (mean over pairs)", title="SmolLM2 trained: last layer")
    ax_curves.legend(fontsize=7)
    with np.load(out / _folder("SmolLM2 trained") / "ratio.npz") as data:
        colors = layer_colors(row["n_layers"])
        for layer in range(1, row["n_layers"] + 1):
            ax_ratio.loglog(data["t"], data["ratio"][layer - 1], color=colors[layer], lw=0.8,
                            label=f"layer {layer}" if layer in drawn_layers(row["n_layers"]) else None)
    ax_ratio.axhline(1, color="0.5", lw=0.8)
    ax_ratio.set(xlabel="t", ylabel="finite / along-pair (geometric mean)", title="SmolLM2 trained: 1 = linear regime")
    ax_ratio.legend(fontsize=6, ncol=2)
    p = summary["settings"]
    fig.suptitle(f"linear response beside the finite offsets: held-out text pairs, P = {p['prompt_len']}, "
                 f"T = {p['own_length']} (own model, {p['depth']} layers, d_model {p['d_model']}, {p['steps']} steps) "
                 f"and T = {p['real_length']} (SmolLM2)")
    fig.tight_layout()
    save_figure(out / "linear_response.png", fig)


def main() -> None:
    script_main(__doc__, "linear_response", PROFILES, run, table, available=available)


if __name__ == "__main__":
    main()
