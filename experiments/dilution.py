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
seeds (intervals resample seeds, then pairs within them; the difference's, paired, whole seeds: both
variants run the same parameters on the same pairs), beside the solvable relay model's alpha on the
same window.

    python experiments/dilution.py --out results/dilution          # quick: depths 1, 2, 4, 2 seeds, T 1024
    python experiments/dilution.py --profile full --out results/dilution

Writes ``depth_<L>/<variant>_seed<k>/`` (``offsets.npz``, ``fit.json``, ``offsets.png``),
``summary.json`` and ``dilution.png`` (alpha per layer of both variants and of the relay model,
and the mean offset curves of the deepest model), drawn from the saved files.
"""

from __future__ import annotations

from pathlib import Path
from typing import NotRequired, TypedDict

import numpy as np
from matplotlib.figure import Figure

import nohair_jax as nh
from nohair_jax import criteria
from nohair_jax.parts import Part
from nohair_jax.claims import CHECK, Claim, Record, part_claims_text
from nohair_jax.model import untrained_model
from nohair_jax.experiments import experiment_parser, parse_experiment_args, relay_alphas, write_summary
from nohair_jax.fit import FitRefused, PowerLawFit, alphas, paired_difference_or_refuse
from nohair_jax.results import load_json, save_figure

PROFILES = {
    "smoke": dict(depths=(2,), seeds=(0, 1), d_model=32, prompt_len=4, length=128, n_pairs=2, t_min=8, n_boot=200),
    "quick": dict(depths=(1, 2, 4), seeds=(0, 1), d_model=128, prompt_len=16, length=1024, n_pairs=8, t_min=32,
                  n_boot=1000),
    "full": dict(depths=(1, 2, 4, 6), seeds=(0, 1, 2, 3), d_model=256, prompt_len=16, length=4096, n_pairs=16,
                 t_min=32, n_boot=1000),
}

PART = Part(order=6, title="Dilution isolated: exactly uniform attention, with and without the bias",
            figures=("dilution.png",),
            about="Untrained networks whose queries are zeroed, so attention only dilutes, against the same "
                  "parameters with the dilution-cancelling logit bias; the relay model beside.",
            quick=("quick", dict(n_pairs=4, seeds=(0,))),
            # the full profile: the sizes the quick one had before the main job was cut to 15 minutes
            full=("quick", dict(n_pairs=4)), seconds=75)

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


class Depth(TypedDict):
    """One depth: alpha per layer without and with the bias (``PowerLawFit`` records, or ``FitRefused``'s,
    intervals over seeds, then pairs), their difference per layer (paired ``AlphaDifference`` records), and
    the relay model's alpha on the same windows."""

    depth: int
    uniform: list[Record]
    uniform_bias: list[Record]
    difference: list[Record]
    relay: list[float]


class Settings(TypedDict):
    seeds: list[int]


class Summary(TypedDict):
    """What ``run`` saves in summary.json and the claims read (``claims.check_summary``)."""

    settings: Settings
    rows: list[Depth]
    profile: NotRequired[str]
    seed: NotRequired[int]
    variants: NotRequired[dict]
    interval: NotRequired[str]


def run(profile: str, out: Path, seed: int = 0, settings: dict | None = None) -> Summary:
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
        row = Depth(depth=depth, **{name: [fit.to_dict() for fit in pooled[name].fits] for name in VARIANTS})
        row["difference"] = [_difference(t, pooled, layer, fits) for layer in range(1, depth + 1)]
        row["relay"] = relay_alphas(p["prompt_len"], p["length"], pooled["uniform"].fits, p["t_min"])
        rows.append(row)
    summary = Summary(profile=profile, settings=p, seed=seed, variants=dict(VARIANTS), rows=rows,
                   interval="t-interval, standard error from a bootstrap over seeds, then pairs within them")
    return write_summary(out, summary, draw)


def _difference(t, pooled: dict, layer: int, fits: dict) -> dict:
    """alpha(uniform) - alpha(uniform_bias) at one layer on a common window, one paired interval (``nh.Pooled``
    each: the same seeds' parameters on the same pairs, pooled in the same order, so one ``groups`` labels both)."""
    a, b = pooled["uniform"], pooled["uniform_bias"]
    return paired_difference_or_refuse(t, a.l2[:, layer], b.l2[:, layer], floor_a=a.floor[layer],
                                       floor_b=b.floor[layer], groups=a.groups, **fits).to_dict()


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


# ---------------------------------------------------------------- the claims this part measures


def _dilution_fits(summary: Summary, variant: str) -> list[tuple[int, int, PowerLawFit | FitRefused]]:
    """(depth, layer, fit) of one variant of the uniform-attention networks, every depth and layer."""
    return [(r["depth"], k, f) for r in summary["rows"] for k, f in enumerate(criteria.read_fits(r[variant]), start=1)]


def _dilution_evidence(summary: Summary) -> dict:
    rows = summary["rows"]
    return dict(depths=[r["depth"] for r in rows], seeds=summary["settings"]["seeds"],
                **{name: [alphas(criteria.read_fits(r[name])) for r in rows] for name in ("uniform", "uniform_bias")},
                **{f"{name}_interval": [[criteria.alpha_interval(f) for f in criteria.read_fits(r[name])] for r in rows]
                   for name in ("uniform", "uniform_bias")},
                difference_interval=[[criteria.difference_ci(d) for d in criteria.read_differences(r["difference"])] for r in rows],
                relay_alpha=[r["relay"] for r in rows])


def _sufficient(summary: Summary):
    fits, evidence = _dilution_fits(summary, "uniform"), _dilution_evidence(summary)
    if any(criteria.alpha_interval(f) is None for _, _, f in fits):
        return criteria.unmeasured("a layer of the uniform-attention networks could not be fitted with an interval", **evidence)
    lowest = min(fits, key=lambda x: criteria.alpha_interval(x[2])[0])
    relay = [a for r in summary["rows"] for a in r["relay"]]
    text = (f"uniform attention, no bias: alpha {min(f.alpha for _, _, f in fits):.2f} to "
            f"{max(f.alpha for _, _, f in fits):.2f} over {len(fits)} layers (depths {evidence['depths']}, "
            f"seeds {evidence['seeds']}); lowest interval {criteria.alpha_interval(lowest[2])} (depth {lowest[0]}, "
            f"layer {lowest[1]}); "
            f"relay model on the same windows {min(relay):.2f} to {max(relay):.2f}")
    return criteria.judged(text, None, criteria.alpha_interval(lowest[2])[0] > 0, **evidence)


def _necessary(summary: Summary):
    fits, evidence = _dilution_fits(summary, "uniform_bias"), _dilution_evidence(summary)
    diffs = [(r["depth"], k, d) for r in summary["rows"] for k, d in enumerate(criteria.read_differences(r["difference"]), start=1)]
    if any(criteria.alpha_interval(f) is None for _, _, f in fits) or not criteria.all_with_interval(d for _, _, d in diffs):
        return criteria.unmeasured("a layer of the biased networks, or its difference, could not be fitted with an interval",
                                   **evidence)
    moving = [f"depth {depth} layer {k} {criteria.alpha_interval(f)}" for depth, k, f in fits if not criteria.near_zero(f)]
    same = [f"depth {depth} layer {k} [{d.ci[0]:+.2f}, {d.ci[1]:+.2f}]" for depth, k, d in diffs if d.ci[0] <= 0]
    text = (f"uniform attention with the bias: alpha {min(f.alpha for _, _, f in fits):+.2f} to "
            f"{max(f.alpha for _, _, f in fits):+.2f} over {len(fits)} layers; not near 0: {moving or 'none'}; "
            f"difference without minus with the bias not above 0: {same or 'none'}")
    return criteria.judged(text, None, not moving and not same, **evidence)


CLAIMS = (
    Claim("dilution_sufficient", "Dilution is sufficient for the forgetting (untrained networks and the solvable model)",
          "alpha > 0 without training", (), "Not measured: the project's test zeroes every query so that attention "
          "only dilutes, and there a positive alpha follows by arithmetic (shares exactly P / (P + t)); it is the check "
          "dilution_sufficient_check. A test on models whose attention is not forced to dilute is not built.",
          criteria.proved("dilution_sufficient_check", "with attention forced to dilute, forgetting follows by arithmetic")),
    Claim("dilution_sufficient_check", "Networks whose attention only dilutes forget (queries zeroed: an identity)",
          "alpha > 0 without training", ("dilution",),
          "Small untrained networks with every query projection zeroed, so every attention logit is exactly 0 and "
          "the prompt's share of attention is exactly P / (P + t): dilution is the only thing in attention that "
          "changes with t. Alpha per layer on t in [32, T] at every depth, the interval over seeds, then pairs. "
          "Agree if every layer's interval lies above 0; disagree if any reaches 0 or below; not measured if a layer "
          "cannot be fitted. The relay model's alpha on the same windows is reported beside.", _sufficient, CHECK),
    Claim("dilution_necessary", "Dilution is necessary: cancelling it with the logit bias stops the forgetting",
          "alpha ~ 0 with the bias", (), "The paper's evidence is training with the bias (the rows bias_stops_decay and "
          "bias_reverses); the project's uniform-attention test holds by arithmetic (the check dilution_necessary_check); "
          "the trained real model with the bias added at inference is the row llm_bias_stops.",
          criteria.proved("dilution_necessary_check", "on uniform attention the bias holds the prompt's share fixed by construction")),
    Claim("dilution_necessary_check", "With attention forced to dilute, the dilution-cancelling bias stops the "
          "forgetting (an identity)", "alpha ~ 0 with the bias", ("dilution",),
          "The same networks (same parameters, seeds and pairs) with the dilution-cancelling bias gamma log(i / P) on "
          "the prompt keys, which holds the prompt's share of attention near a half. Agree if in every layer the biased "
          f"alpha's interval lies inside the equivalence margin +-{criteria.EQUIVALENCE_MARGIN:g} and alpha without minus with the bias, with "
          f"{criteria.PAIRED_CRITERION}, lies above 0; fail if any layer fails either; not measured if a layer cannot be "
          "fitted.", _necessary, CHECK),
)


def main() -> None:
    args = parse_experiment_args(experiment_parser(__doc__, "dilution", PROFILES))
    summary = run(args.profile, args.out, args.seed)
    for row in summary["rows"]:
        pairs = zip(map(nh.fit_from_dict, row["uniform"]), map(nh.fit_from_dict, row["uniform_bias"]), row["relay"])
        cells = [f"L{k}: {f.brief()} vs {g.brief()} (relay {r:.2f})" for k, (f, g, r) in enumerate(pairs, 1)]
        print(f"depth {row['depth']}, alpha without vs with the bias: " + "; ".join(cells))
    print(part_claims_text(CLAIMS, summary))


if __name__ == "__main__":
    main()
