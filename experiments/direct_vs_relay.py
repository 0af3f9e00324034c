"""Direct read versus relay in an untrained model
(docs/definitions.md#bound).

Splits each pair's offset into what continuation tokens read from the prompt directly and what
reaches them through earlier continuation tokens (``nohair_jax.direct_relay``), fits alpha to each part
per layer, and draws them. Near-uniform attention (an untrained model) should make the direct
part decay like dilution (alpha near 1) and leave the log factors to relay.

    python experiments/direct_vs_relay.py --out results/direct_vs_relay

Writes ``split.npz`` (t, total, direct, relay), ``split.json`` (fits per layer and part) and
``split.png`` drawn from them.
"""

from __future__ import annotations

from pathlib import Path
from typing import NotRequired, TypedDict

import numpy as np
from matplotlib.figure import Figure

import nohair_jax as nh
from nohair_jax import criteria
from nohair_jax.parts import Part
from nohair_jax.claims import CHECK, Claim, Record
from nohair_jax.direct_relay import direct_relay_split
from nohair_jax.fit import PowerLawFit, alphas
from nohair_jax.experiments import experiment_parser, parse_experiment_args, untrained_model_and_pairs, write_summary
from nohair_jax.results import load_json, save_figure, save_npz

PROFILES = {
    "smoke": dict(depth=2, d_model=32, prompt_len=4, length=128, n_pairs=2),
    "quick": dict(depth=4, d_model=128, prompt_len=16, length=2048, n_pairs=8),
    "full": dict(depth=6, d_model=256, prompt_len=16, length=8192, n_pairs=32),
}

PART = Part(order=5, title="Direct read versus relay", figures=("split.png",), summary="split.json",
            about="Each offset split into what continuation tokens read from the prompt directly and what reaches "
                  "them by relay.",
            quick=("quick", dict(length=1024)))

PARTS = ("total", "direct", "relay")
DILUTION_TOLERANCE = 0.1  # the direct read "dilutes as P / (P + t)": its alpha within this of that curve's


class Split(TypedDict):
    """Saved fits (``PowerLawFit`` or ``FitRefused`` records) per layer of each part of the offset."""

    direct: list[Record]
    total: NotRequired[list[Record]]
    relay: NotRequired[list[Record]]


class Settings(TypedDict):
    prompt_len: int


class Summary(TypedDict):
    """What ``run`` saves in split.json and the claims read (``claims.check_summary``)."""

    settings: Settings
    fits: Split
    profile: NotRequired[str]
    seed: NotRequired[int]
    model: NotRequired[dict]


def run(profile: str, out: Path, seed: int = 0, settings: dict | None = None) -> Summary:
    p = dict(PROFILES[profile], **(settings or {}))
    model, pairs = untrained_model_and_pairs(p, p["depth"], seed)
    split = direct_relay_split(model, *pairs, progress=True)
    save_npz(out / "split.npz", t=split.t, **{part: getattr(split, part) for part in PARTS})
    # Relay is exactly zero at layer 1 (nothing to relay yet): its fit there is refused, by design.
    fits = {part: [fit.to_dict() for fit in nh.fit_layers(split.t, getattr(split, part))] for part in PARTS}
    result = dict(profile=profile, settings=p, seed=seed, model=model.config.to_dict(), fits=fits)
    return write_summary(out, result, draw, name="split.json")


def draw(out: Path) -> None:
    data, saved = np.load(out / "split.npz"), load_json(out / "split.json")
    depth = data["total"].shape[1] - 1
    fig = Figure(figsize=(4 * depth, 3.8))
    for layer, ax in enumerate(np.atleast_1d(fig.subplots(1, depth)), start=1):
        for part, style in zip(PARTS, ("k-", "C0-", "C3-")):
            curve = nh.summary_curve(data[part][:, layer])
            if np.all(curve > 0):
                fit = nh.fit_from_dict(saved["fits"][part][layer - 1])
                label = part + (f", alpha {fit.alpha:.2f}" if isinstance(fit, nh.PowerLawFit) else "")
                ax.loglog(data["t"], curve, style, label=label)
        ax.set(title=f"layer {layer}", xlabel="t")
        ax.legend(fontsize=8)
    fig.axes[0].set_ylabel("offset, mean over pairs")
    fig.suptitle("direct read of the prompt versus relay through earlier continuation tokens (untrained)")
    fig.tight_layout()
    save_figure(out / "split.png", fig)


# ---------------------------------------------------------------- the claims this part measures


def _direct(summary: Summary):
    fits = criteria.read_fits(summary["fits"]["direct"])
    refused = [layer for layer, f in enumerate(fits, start=1) if not isinstance(f, PowerLawFit)]
    if refused:
        return criteria.unmeasured(f"the direct part of layer(s) {refused} could not be fitted: "
                                   + "; ".join(f.reason for f in fits if not isinstance(f, PowerLawFit)))
    # Each layer against dilution on its own window (a floor can end the layers' windows at different t).
    reference = [criteria.dilution_alpha(summary["settings"]["prompt_len"], f.t_range) for f in fits]
    direct = alphas(fits)
    text = ("direct-read alpha against dilution P/(P+t) on the same window, per layer: "
            + ", ".join(f"{a:.2f} / {r:.2f}" for a, r in zip(direct, reference)))
    return criteria.judged(text, [round(min(direct), 3), round(max(direct), 3)],
                           all(abs(a - r) < DILUTION_TOLERANCE for a, r in zip(direct, reference)),
                           direct_alpha=direct, dilution_alpha=reference)


CLAIMS = (
    Claim("direct_is_dilution", "The direct read of an untrained model (near-uniform attention) dilutes as P/(P+t)",
          "alpha = 1 for P/(P+t)", ("direct_vs_relay",),
          "Per layer, alpha of the direct-read part of the offset against alpha of P / (P + t) fitted on that layer's "
          f"window. Pass if every layer is within {DILUTION_TOLERANCE:g} of it, fail otherwise; not measured if some "
          "layer's direct part cannot be fitted.", _direct, CHECK),
)


def main() -> None:
    args = parse_experiment_args(experiment_parser(__doc__, "direct_vs_relay", PROFILES))
    result = run(args.profile, args.out, args.seed)
    for part in PARTS:
        cells = [nh.fit_from_dict(f).brief() for f in result["fits"][part]]
        print(f"{part:>6} alpha per layer: {', '.join(cells)}")


if __name__ == "__main__":
    main()
