"""Attention sinks on the real model (the project's own measurement): who takes the attention, and what it does to the offsets.

SmolLM2-135M-Instruct (the packaged real model) and its exact config at init, on windows of the
held-out text (docs/definitions.md#sinks): the share of attention that every layer's heads put on
the first key, and on keys 1 to 3 (other early sinks), averaged over the later half of the
queries, against what pure dilution gives (``nh.dilution_share``); sinks anywhere in the first
half of a window (``nh.key_attention``: keys above ten times dilution, and which tokens they are);
the first key's share against the query position, beside dilution's ``1 / (i + 1)``; and the
bound's largest logit B per layer beside it (the bound admits a sink only through its factor
``e^(2B)``). Then the prompt pairs of the real model, measured twice: as cut (different first
tokens) and with prompt b's first token set to a's (a shared sink): offsets and alpha per layer
of both, and per layer alpha(shared) minus alpha(different) on a common window, one paired interval
(the same pairs measured both ways: ``fit.paired_alpha_difference``).

    python experiments/sinks.py --out results/sinks            # quick, about 90 s on 2 cores
    python experiments/sinks.py --profile full --out results/sinks

Writes ``shares.npz`` (per model: share [L, H] on key 0, early [L, H] on keys 1..3, by_query
[L, Q], keys [L, B, T]), ``different_first/`` and ``shared_first/`` (offsets.npz and fit.json),
``summary.json`` and ``sinks.png``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import NotRequired, TypedDict

import numpy as np
from matplotlib.figure import Figure

import nohair_jax as nh
from nohair_jax import criteria
from nohair_jax.bound import measure_conditions
from nohair_jax.parts import Part
from nohair_jax.claims import Claim, PartSummary, Record
from nohair_jax.experiments import (REAL_MODEL, first_layers, heldout_text_tokens, real_model_at_init,
                                    real_model_available, script_main, write_summary)
from nohair_jax.figures import drawn_layers, layer_colors
from nohair_jax.fit import AlphaDifference, paired_difference_or_refuse
from nohair_jax.results import load_json, save_figure, save_npz
from nohair_jax.sinks import dilution_share, key_attention, sink_attention

SINK_FACTOR = 10  # a sink: an order of magnitude more attention than dilution gives
PROFILES = {
    "smoke": dict(first_layers=2, windows=2, window_len=64, prompt_len=4, length=64, n_pairs=2, t_min=8, n_boot=100),
    "quick": dict(first_layers=None, windows=4, window_len=256, prompt_len=16, length=256, n_pairs=8, t_min=16,
                  n_boot=1000),
    "full": dict(first_layers=None, windows=16, window_len=1024, prompt_len=16, length=1024, n_pairs=32, t_min=32,
                 n_boot=1000),
}

PART = Part(order=16, title="Attention sinks in the real model (the project's own measurement)",
            figures=("sinks.png",),
            about="The attention SmolLM2's heads put on the first keys against dilution, per layer, head and query, "
                  "beside the bound's B; and its offsets when the two prompts share the first token against when they"
                  " do not.",
            quick=("quick", dict(windows=2, n_pairs=6)), full=("quick", {}), seconds=100)

EARLY_KEYS = 4  # keys 0..3: the first key and the next three, where other sinks at the start would sit
available = real_model_available  # reproduce skips the part where this says why


def _shares(model, windows: np.ndarray) -> dict:
    """share [L, H] on key 0 and early [L, H] on keys 1..3 (queries from T // 2 on); by_query [L, Q]:
    key 0's share, mean over heads, at every query from 1 on (0-based); keys [L, B, T]: every key's
    share at the queries from T // 2 on, mean over heads."""
    keys = key_attention(model, windows)  # [L, B, H, T]: the queries from T // 2 on, as sink_attention's default
    by_query = sink_attention(model, windows, from_query=1, by_query=True).mean(axis=1)
    return dict(share=keys[..., 0].mean(axis=1), early=keys[..., 1:EARLY_KEYS].sum(-1).mean(axis=1), by_query=by_query,
                keys=keys.mean(axis=2))


def _other_sinks(keys: np.ndarray, windows: np.ndarray, tokenizer, dilution: float) -> dict:
    """Keys 1 .. T // 2 - 1 (read by every later-half query) whose share, mean over heads, exceeds
    ``SINK_FACTOR`` times dilution: how many per window and layer, and which tokens they are."""
    half = windows.shape[1] // 2
    layer, window, key = np.nonzero(keys[:, :, 1:half] > SINK_FACTOR * dilution)
    tokens, counts = np.unique(windows[window, key + 1], return_counts=True)
    top = np.argsort(-counts)[:8]
    return dict(per_window=(np.bincount(layer, minlength=keys.shape[0]) / windows.shape[0]).tolist(),
                keys_read=half - 1, tokens=[dict(token=tokenizer.decode([int(tokens[k])]), id=int(tokens[k]),
                                                 count=int(counts[k])) for k in top])


def shared_first_token(pairs: nh.PromptPairs) -> nh.PromptPairs:
    """``pairs`` with each prompt b's first token set to its prompt a's: the first key, SmolLM2's attention
    sink, is then the same token in both runs (and, causal, the same hidden state at every layer), so it is
    no part of the prompts' difference. A copy; ``pairs`` is left as it is."""
    a, b, c = pairs
    shared = b.copy()
    shared[:, 0] = a[:, 0]
    return nh.PromptPairs(a, shared, c)


class Shares(TypedDict):
    """Key 0's attention share per layer (mean over heads and queries, and the largest; the first keys' mean)."""

    mean: list[float]
    max: NotRequired[list[float]]
    early_mean: NotRequired[list[float]]


class PerModel(TypedDict):
    trained: Shares
    init: Shares


class Windows(TypedDict):
    """The text windows the shares are measured on, and dilution's share of key 0 over their queries."""

    dilution_share: float
    n: NotRequired[int]
    length: NotRequired[int]
    from_query: NotRequired[int]
    early_dilution_share: NotRequired[float]


class Summary(PartSummary):
    """What ``run`` saves in summary.json and the claims read (``claims.check_summary``):
    ``shared_minus_different`` is one paired ``AlphaDifference`` (or ``FitRefused``) record per layer."""

    windows: Windows
    share: PerModel
    shared_minus_different: list[Record]
    checkpoint: NotRequired[str]
    other_sinks: NotRequired[dict]
    logit_bound: NotRequired[list[float]]
    pairs: NotRequired[dict]
    offsets: NotRequired[dict]
    wall_s: NotRequired[float]


def run(profile: str, out: Path, settings: dict | None = None) -> Summary:
    p = dict(PROFILES[profile], **(settings or {}))
    start = time.perf_counter()
    model, tokenizer = nh.load_checkpoint(REAL_MODEL)
    model = first_layers(model, p["first_layers"])
    text = heldout_text_tokens(tokenizer)
    cut = nh.text_prompt_pairs(text, 5, p["windows"], 1, p["window_len"] - 1)
    windows = np.concatenate([cut.prompts_a, cut.continuations], axis=1)  # [n, T]: the first key is a text token
    shares = {"trained": _shares(model, windows), "init": _shares(real_model_at_init(model.config, 0), windows)}
    save_npz(out / "shares.npz", **{f"{when}_{key}": x for when, d in shares.items() for key, x in d.items()})
    dilution = dilution_share(p["window_len"])
    others = {when: _other_sinks(d["keys"], windows, tokenizer, dilution) for when, d in shares.items()}

    pairs = nh.text_prompt_pairs(text, 1, p["n_pairs"], p["prompt_len"], p["length"])
    a, b, c = pairs
    fits = dict(t_min=p["t_min"], n_boot=p["n_boot"])
    runs = {}
    for name, measured in (("different_first", pairs), ("shared_first", shared_first_token(pairs))):
        runs[name] = nh.measure(model, measured, floor_pairs=1, kl_positions="log", fit_kwargs=fits, progress=True)
        runs[name].save(out / name, meta=dict(experiment="sinks", first_token=name), figure=False)  # sinks.png draws both
    t, (same, diff) = runs["shared_first"].offsets.t, (runs[k] for k in ("shared_first", "different_first"))
    shared_minus_different = [  # the same pairs (a, c) both ways, in order: a paired interval
        paired_difference_or_refuse(t, same.offsets.l2[:, layer], diff.offsets.l2[:, layer], floor_a=same.floor[layer],
                                    floor_b=diff.floor[layer], **fits).to_dict()
        for layer in range(1, model.config.n_layers + 1)]
    conditions = measure_conditions(model, a[:1], b[:1], c[:1]).to_dict()

    per_layer = {when: dict(mean=d["share"].mean(axis=1).tolist(), max=d["share"].max(axis=1).tolist(),
                            early_mean=d["early"].mean(axis=1).tolist()) for when, d in shares.items()}
    summary = Summary(
        profile=profile, settings=p, checkpoint=REAL_MODEL, model=model.config.to_dict(),
        windows=dict(n=p["windows"], length=p["window_len"], from_query=p["window_len"] // 2, dilution_share=dilution,
                     early_dilution_share=dilution_share(p["window_len"], keys=EARLY_KEYS) - dilution),
        share=per_layer, other_sinks=others, logit_bound=conditions["logit_bound"][: model.config.n_layers],
        pairs=dict(n=p["n_pairs"], prompt_len=p["prompt_len"], length=p["length"],
                   first_token_already_shared=int((a[:, 0] == b[:, 0]).sum())),
        offsets={name: dict(fits=[f.to_dict() for f in m.fits],
                            last_layer_mean=[float(m.offsets.l2[:, -1, k - 1].mean()) for k in (1, 16, p["length"])])
                 for name, m in runs.items()},
        shared_minus_different=shared_minus_different, wall_s=time.perf_counter() - start)
    return write_summary(out, summary, draw)


def table(summary: dict) -> str:
    dilution, lines = summary["windows"]["dilution_share"], []
    for when, d in summary["share"].items():
        ratio = np.asarray(d["mean"]) / dilution
        lines.append(f"{when:>7}: key 0's share / dilution, per layer: " + " ".join(f"{r:.0f}" for r in ratio))
    for when, o in summary["other_sinks"].items():
        lines.append(f"{when:>7}: keys 1..{o['keys_read']} above {SINK_FACTOR}x dilution, per window and layer: "
                     + " ".join(f"{c:.1f}" for c in o["per_window"]) + "; tokens: "
                     + ", ".join(f"{t['token']!r} ({t['count']})" for t in o["tokens"]))
    for name, o in summary["offsets"].items():
        layers = drawn_layers(len(o["fits"]), most=6)
        lines.append(f"{name}: alpha, layers {layers}: "
                     + "; ".join(nh.fit_from_dict(o["fits"][k - 1]).brief() for k in layers))
    lines.append("last layer, alpha(shared) - alpha(different): "
                 + nh.fit_from_dict(summary["shared_minus_different"][-1]).brief())
    return "\n".join(lines)


def draw(out: Path) -> None:
    """sinks.png: key 0's share per layer and head (trained), the mean share per layer against
    dilution (trained and init) beside B, key 0's share against the query (every layer, coloured by
    depth) beside 1 / (i + 1), and the last layer's offsets with a shared and a different first token."""
    summary = load_json(out / "summary.json")
    dilution = summary["windows"]["dilution_share"]
    fig = Figure(figsize=(21, 4.8))
    ax_heat, ax_layers, ax_query, ax_offsets = fig.subplots(1, 4)
    with np.load(out / "shares.npz") as data:
        share, by_query = data["trained_share"], data["trained_by_query"]
    n_layers = share.shape[0]
    image = ax_heat.imshow(share.T, aspect="auto", origin="lower", cmap="magma", vmin=0, vmax=1,
                           extent=(0.5, n_layers + 0.5, -0.5, share.shape[1] - 0.5))
    fig.colorbar(image, ax=ax_heat, label="attention on key 0")
    ax_heat.set(xlabel="layer", ylabel="head", title="trained: key 0's share per head")
    layers = np.arange(1, n_layers + 1)
    for when, style in (("trained", "o-"), ("init", "s--")):
        ax_layers.semilogy(layers, summary["share"][when]["mean"], style, ms=3, label=f"{when}: key 0, mean over heads")
    ax_layers.semilogy(layers, summary["share"]["trained"]["early_mean"], "^:", ms=3, label="trained: keys 1-3")
    ax_layers.axhline(dilution, color="0.5", lw=0.8, label="dilution, key 0")
    ax_layers.axhline(summary["windows"]["early_dilution_share"], color="0.5", lw=0.8, ls=":", label="dilution, keys 1-3")
    twin = ax_layers.twinx()
    twin.plot(layers, summary["logit_bound"], color="C3", lw=0.8, alpha=0.6)
    twin.set_ylabel("largest |logit| B (trained)", color="C3")
    ax_layers.set(xlabel="layer", ylabel="share of attention", title="share per layer, beside the bound's B")
    ax_layers.legend(fontsize=7)
    i = np.arange(1, by_query.shape[1] + 1)
    colors = layer_colors(n_layers)
    for layer in layers:
        ax_query.loglog(i, by_query[layer - 1], color=colors[layer], lw=0.7,
                        label=f"layer {layer}" if layer in drawn_layers(n_layers) else None)
    ax_query.loglog(i, 1 / (i + 1), "k--", lw=1, label="dilution 1 / (i + 1)")
    ax_query.set(xlabel="query i (0-based)", ylabel="key 0's share (mean over heads)", title="trained: share against i")
    ax_query.legend(fontsize=6, ncol=2)
    for name, style in (("different_first", "-"), ("shared_first", "--")):
        with np.load(out / name / "offsets.npz") as data:
            ax_offsets.loglog(data["t"], nh.summary_curve(data["l2"][:, -1]), style, color="k", label=name.replace("_", " "))
    ax_offsets.set(xlabel="t", ylabel="offset, last layer (mean over pairs)", title="a shared against a different first token")
    ax_offsets.legend(fontsize=7)
    fig.suptitle(f"attention sinks in {summary['checkpoint']}: {summary['windows']['n']} text windows of "
                 f"{summary['windows']['length']} tokens (queries from {summary['windows']['from_query']} in the shares)")
    fig.tight_layout()
    save_figure(out / "sinks.png", fig)


# ---------------------------------------------------------------- the claims this part measures


def _sink_first_token(summary: Summary):
    dilution, shares = summary["windows"]["dilution_share"], summary["share"]
    sinks = {when: [k for k, v in enumerate(shares[when]["mean"], start=1) if v > SINK_FACTOR * dilution]
             for when in ("trained", "init")}
    n_layers = len(shares["trained"]["mean"])
    text = (f"key 0 takes more than {SINK_FACTOR}x its dilution share ({dilution:.4f}) in {len(sinks['trained'])} of "
            f"{n_layers} layers trained (layers {sinks['trained']}), {len(sinks['init'])} at init; mean share per layer "
            f"trained {min(shares['trained']['mean']):.3f} to {max(shares['trained']['mean']):.3f}")
    ok = len(sinks["trained"]) > n_layers / 2 and len(sinks["init"]) <= n_layers / 2
    return criteria.judged(text, None, ok, sink_layers=sinks, dilution_share=dilution, mean_share=shares)


def _sink_shared(summary: Summary):
    diffs = criteria.read_differences(summary["shared_minus_different"])
    last = diffs[-1]
    if not criteria.all_with_interval([last]):
        return criteria.unmeasured("the last layer's difference could not be fitted with an interval",
                                   refused=criteria.refusals([last]))
    excluded = [k for k, d in enumerate(diffs, start=1) if isinstance(d, AlphaDifference) and d.ci is not None
                and not d.ci[0] <= 0 <= d.ci[1]]
    text = (f"last layer, alpha(shared) - alpha(different): {last.brief()} on t in {list(last.t_range)}; "
            f"layers whose interval excludes 0: {excluded or 'none'}")
    return criteria.equivalence(text, [round(v, 3) for v in last.ci], last_layer=last.to_dict(), layers_excluding_zero=excluded)


CLAIMS = (
    Claim("sink_first_token", "(This project) SmolLM2's first token is an attention sink, which training made: it "
          f"takes more than {SINK_FACTOR} times its dilution share in most layers, and not at initialisation", criteria.OWN,
          ("sinks",),
          "The attention weight on key 0, mean over heads, over the queries of the later half of held-out text windows, "
          f"per layer, against dilution's mean of 1 / (i + 1) over the same queries. Agree if it exceeds {SINK_FACTOR} "
          "times that in more than half of the trained model's layers and in at most half at init (fresh parameters of "
          "the same config); disagree otherwise.", _sink_first_token),
    Claim("sink_shared_first_token", "(This project) A shared first token (the sink) does not change how fast the "
          "prompt is forgotten (SmolLM2-135M-Instruct, last layer)", criteria.OWN, ("sinks",),
          "The real model's held-out text pairs measured as cut and with prompt b's first token set to prompt a's: the "
          "last layer's alpha(shared) minus alpha(different) on a common window, t from the profile's t_min (fixed "
          "before the data) to T, ended above both noise floors, "
          f"{criteria.PAIRED_CRITERION}. Equivalence, margin {criteria.EQUIVALENCE_MARGIN}: agree if the interval lies "
          "inside it, disagree if wholly outside, otherwise (or if the difference is refused) not measured.", _sink_shared),
)


def main() -> None:
    script_main(__doc__, "sinks", PROFILES, run, table, claims=CLAIMS, available=available)


if __name__ == "__main__":
    main()
