"""Dilution isolated: exactly uniform attention, with and without the dilution-cancelling bias.

The first paper says dilution is sufficient for the forgetting (untrained networks and the solvable
model forget) and necessary (cancelling it with a logit bias stops the decay). A decaying curve
in a general network does not show either: attention there also changes with content. So this
builds networks in which dilution is all attention does: the small untrained architecture
(pre-LN, learned positions, d_model 128) with every query projection set to zero, so that every
attention logit is exactly 0 and every query reads the causal mean of the values. The prompt's
share of attention at continuation position t is then exactly P / (P + t)
(docs/definitions.md#dilution). The same parameters run twice:

- ``uniform``: as above; the only thing in attention that changes with t is dilution;
- ``uniform_bias``: plus the dilution-cancelling bias ``gamma log(i / P)`` on the prompt keys
  (``nh.PromptLogitBias``, gamma 1), which holds the prompt's share at (P + t) / (P + 2t) -> 1/2.

Dilution is sufficient if the first forgets (alpha above 0 in every layer) and necessary if the
second does not (alpha near 0 in every layer, the difference above 0). Both at several depths and
seeds (intervals resample seeds, then pairs within them), beside the solvable relay model's alpha
on the same window.

    python experiments/dilution.py --out results/dilution          # quick: depths 1, 2, 4, 2 seeds, T 1024
    python experiments/dilution.py --profile full --out results/dilution

Writes ``depth_<L>/<variant>_seed<k>/`` (``offsets.npz``, ``fit.json``, ``offsets.png``),
``summary.json`` and ``dilution.png`` (alpha per layer of both variants and of the relay model,
and the mean offset curves of the deepest model), drawn from the saved files.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

import nohair_jax as nh
from nohair_jax.claims import part_claims_text
from nohair_jax.model import untrained_model
from nohair_jax.experiments import experiment_parser, parse_experiment_args, relay_alphas
from nohair_jax.results import load_json, save_figure, save_json

PROFILES = {
    "smoke": dict(depths=(2,), seeds=(0, 1), d_model=32, prompt_len=4, length=128, n_pairs=2, t_min=8, n_boot=200),
    "quick": dict(depths=(1, 2, 4), seeds=(0, 1), d_model=128, prompt_len=16, length=1024, n_pairs=8, t_min=32,
                  n_boot=1000),
    "full": dict(depths=(1, 2, 4, 6), seeds=(0, 1, 2, 3), d_model=256, prompt_len=16, length=4096, n_pairs=16,
                 t_min=32, n_boot=1000),
}
VARIANTS = {"uniform": None, "uniform_bias": 1.0}  # name: gamma of the prompt logit bias (None: no bias)


def uniform_attention(model: nh.Transformer) -> nh.Transformer:
    """``model`` with every query projection (kernel and bias) set to zero, in place: each attention
    logit is then exactly 0 and each query reads the causal mean of the values."""
    for block in model.blocks:
        q = block.attn.q
        q.kernel[...] = np.zeros(q.kernel.shape, q.kernel.dtype)
        if q.bias is not None:
            q.bias[...] = np.zeros(q.bias.shape, q.bias.dtype)
    return model


def uniform_model(depth: int, seed: int, gamma: float | None, p: dict) -> nh.Transformer:
    """The profile's untrained architecture at ``seed`` with uniform attention; with the bias at ``gamma`` (None: none)."""
    bias = None if gamma is None else nh.PromptLogitBias(p["prompt_len"], gamma)
    return uniform_attention(untrained_model(depth, d_model=p["d_model"], max_len=p["prompt_len"] + p["length"],
                                             seed=seed, prompt_logit_bias=bias))


def run(profile: str, out: Path, seed: int = 0, settings: dict | None = None) -> dict:
    """``seed`` offsets the model seeds and draws the pairs; returns the summary."""
    p = dict(PROFILES[profile], **(settings or {}))
    fits = dict(t_min=p["t_min"], n_boot=p["n_boot"])
    pairs = nh.random_prompt_pairs(seed + 1, p["n_pairs"], p["prompt_len"], p["length"], 256)
    t = np.arange(1, p["length"] + 1)
    rows = []
    for depth in p["depths"]:
        print(f"depth {depth}: {len(p['seeds'])} seeds x {p['n_pairs']} pairs, T = {p['length']}", flush=True)
        pooled = {}
        for name, gamma in VARIANTS.items():
            runs = []
            for k in p["seeds"]:
                folder = out / f"depth_{depth}" / f"{name}_seed{seed + k}"
                runs.append(nh.measure(uniform_model(depth, seed + k, gamma, p), pairs, floor_pairs=1, fit_kwargs=fits))
                runs[-1].save(folder, meta=dict(experiment="dilution", variant=name, seed=seed + k))
            pooled[name] = nh.pool(runs, **fits)  # [seeds * pairs, L+1, T], intervals over seeds, then pairs
        row = dict(depth=depth, **{name: [fit.to_dict() for fit in pooled[name].fits] for name in VARIANTS})
        row["difference"] = [_difference(t, pooled, layer, fits) for layer in range(1, depth + 1)]
        row["relay"] = relay_alphas(p["prompt_len"], p["length"], pooled["uniform"].fits, p["t_min"])
        rows.append(row)
    summary = dict(profile=profile, settings=p, seed=seed, variants=dict(VARIANTS), rows=rows,
                   interval="t-interval, standard error from a bootstrap over seeds, then pairs within them")
    save_json(out / "summary.json", summary)
    draw(out)
    return summary


def _difference(t, pooled: dict, layer: int, fits: dict) -> dict:
    """alpha(uniform) - alpha(uniform_bias) at one layer on a common window, one interval (``nh.Pooled`` each)."""
    a, b = pooled["uniform"], pooled["uniform_bias"]
    return nh.difference_or_refuse(t, a.l2[:, layer], b.l2[:, layer], floor_a=a.floor[layer], floor_b=b.floor[layer],
                                   groups_a=a.groups, groups_b=b.groups, **fits).to_dict()


def draw(out: Path) -> None:
    s = load_json(out / "summary.json")
    fig = Figure(figsize=(12, 4.4))
    ax_alpha, ax_curve = fig.subplots(1, 2)
    for i, row in enumerate(s["rows"]):
        layers = np.arange(1, row["depth"] + 1) + 0.08 * (i - 1)  # depths side by side
        for name, marker in (("uniform", "o"), ("uniform_bias", "s")):
            alpha, lo, hi = nh.alpha_table([nh.fit_from_dict(f) for f in row[name]]).T
            ax_alpha.errorbar(layers, alpha, yerr=[alpha - lo, hi - alpha], fmt=marker, ms=4, capsize=2,
                              color=f"C{i}", mfc="none" if name == "uniform_bias" else None,
                              label=f"depth {row['depth']}, {'with the bias' if name == 'uniform_bias' else 'no bias'}")
        ax_alpha.plot(layers, row["relay"], "x", color=f"C{i}", ms=6, label=f"depth {row['depth']}, relay model")
    ax_alpha.set_xticks(range(1, max(r["depth"] for r in s["rows"]) + 1))
    ax_alpha.axhline(0, color="grey", lw=0.8)
    ax_alpha.set(xlabel="layer", ylabel="alpha", title="uniform attention: alpha per layer (95 %, seeds then pairs)")
    ax_alpha.legend(fontsize=7, ncol=2)
    deepest = s["rows"][-1]["depth"]
    for name, style in (("uniform", "-"), ("uniform_bias", "--")):
        with np.load(out / f"depth_{deepest}" / f"{name}_seed{s['seed'] + s['settings']['seeds'][0]}" / "offsets.npz") as d:
            t, mean = d["t"], d["l2"].mean(0)
        for layer in range(1, deepest + 1):
            ax_curve.loglog(t, mean[layer], style, color=f"C{layer - 1}",
                            label=f"layer {layer}" if name == "uniform" else None)
    ax_curve.set(xlabel="continuation position t", ylabel="offset ||h_a - h_b|| (mean over pairs)",
                 title=f"depth {deepest}, first seed: no bias (solid), with the bias (dashed)")
    ax_curve.legend(fontsize=7)
    fig.tight_layout()
    save_figure(out / "dilution.png", fig)


def main() -> None:
    args = parse_experiment_args(experiment_parser(__doc__, "dilution", PROFILES))
    summary = run(args.profile, args.out, args.seed)
    for row in summary["rows"]:
        pairs = zip(map(nh.fit_from_dict, row["uniform"]), map(nh.fit_from_dict, row["uniform_bias"]), row["relay"])
        cells = [f"L{k}: {f.brief()} vs {g.brief()} (relay {r:.2f})" for k, (f, g, r) in enumerate(pairs, 1)]
        print(f"depth {row['depth']}, alpha without vs with the bias: " + "; ".join(cells))
    print(part_claims_text("dilution", summary))


if __name__ == "__main__":
    main()
