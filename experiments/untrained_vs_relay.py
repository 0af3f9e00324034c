"""Local exponent of untrained networks against the exactly solvable relay model.

The claim: in untrained networks the local exponent ``-dlog d / dlog t`` rises towards 1 as
``t`` grows, as it does in the linear relay model (``nohair_jax.relay.local_exponent``), whose
exponent at layer ``l`` approaches 1 only like ``1 - (l-1) / log t``. Both are drawn on one figure
per layer, with the relay model without and with the residual stream.

    python experiments/untrained_vs_relay.py --out results/untrained_vs_relay

Writes ``local_exponent.npz`` (t, l2 of the network), ``local_exponent.json`` (settings, the
network's and the relay model's exponents on the binned grid) and ``local_exponent.png``.
"""

from __future__ import annotations

from pathlib import Path
from typing import NotRequired, TypedDict

import numpy as np
from matplotlib.figure import Figure

import nohair_jax as nh
from nohair_jax import criteria
from nohair_jax.parts import Part
from nohair_jax.claims import Claim, PartSummary, Record
from nohair_jax.experiments import experiment_parser, exponent_rise, parse_experiment_args, untrained_model_and_pairs, write_summary
from nohair_jax.results import load_json, save_figure, save_npz

PROFILES = {
    "smoke": dict(depth=2, d_model=32, prompt_len=4, length=256, n_pairs=2),
    "quick": dict(depth=4, d_model=128, prompt_len=16, length=4096, n_pairs=4),
    "full": dict(depth=6, d_model=256, prompt_len=16, length=32768, n_pairs=16),
}

PART = Part(order=4, title="Local exponent: untrained network and relay model", figures=("local_exponent.png",),
            summary="local_exponent.json",
            about="The local exponent of the measured offsets beside the solvable model's, per layer.",
            quick=("quick", dict(length=2048)))


class RiseLayer(TypedDict):
    """One layer: its local exponent on the log-t grid ``t`` beside the relay model's, and the rise of each
    (``experiments.exponent_rise``: an ``ExponentRise`` record and the relay model's rise)."""

    layer: int
    rise: Record
    relay_rise: float
    t: NotRequired[list[float]]
    network: NotRequired[list[float]]
    relay: NotRequired[list[float]]
    relay_residual: NotRequired[list[float]]


class Summary(PartSummary):
    """What ``run`` saves in local_exponent.json and the claims read (``claims.check_summary``)."""

    layers: list[RiseLayer]


def run(profile: str, out: Path, seed: int = 0, settings: dict | None = None) -> Summary:
    p = dict(PROFILES[profile], **(settings or {}))
    model, pairs = untrained_model_and_pairs(p, p["depth"], seed)
    off = nh.prompt_pair_offsets(model, *pairs, progress=True)
    save_npz(out / "local_exponent.npz", t=off.t, l2=off.l2)
    layers = []
    for layer in range(1, p["depth"] + 1):
        # the geometric-mean curve: the one the judged rise reads (docs/definitions.md#fits)
        t_grid, network = nh.local_exponent(off.t, off.l2[:, layer], summary="geomean")
        layers.append(dict(
            layer=layer, t=t_grid, network=network, **exponent_rise(off.t, off.l2[:, layer], p["prompt_len"], layer),
            relay=np.asarray(nh.relay.local_exponent(p["prompt_len"], t_grid, layer)),
            relay_residual=np.asarray(nh.relay.local_exponent(p["prompt_len"], t_grid, layer, residual=True)),
        ))
    result = dict(profile=profile, settings=p, seed=seed, model=model.config.to_dict(), layers=layers)
    return write_summary(out, result, draw, name="local_exponent.json")


def draw(out: Path) -> None:
    saved = load_json(out / "local_exponent.json")
    rows = saved["layers"]
    fig = Figure(figsize=(4 * len(rows), 3.8))
    for row, ax in zip(rows, np.atleast_1d(fig.subplots(1, len(rows)))):
        ax.semilogx(row["t"], row["network"], "k.-", label="untrained network")
        ax.semilogx(row["t"], row["relay"], "C0--", label="relay model")
        ax.semilogx(row["t"], row["relay_residual"], "C3:", label="relay model, residual")
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set(title=f"layer {row['layer']}", xlabel="t", ylim=(-0.1, 1.15))
        ax.legend(fontsize=8)
    fig.axes[0].set_ylabel("local exponent -dlog d / dlog t")
    s = saved["settings"]
    fig.suptitle(f"local exponents, P = {s['prompt_len']}, d_model {s['d_model']}, {s['n_pairs']} pairs")
    fig.tight_layout()
    save_figure(out / "local_exponent.png", fig)


# ---------------------------------------------------------------- the claims this part measures


def _exponent_rise(summary: Summary):
    return criteria.rise([row for row in summary["layers"] if row["layer"] >= 2])


CLAIMS = (
    Claim("exponent_rise", "The relay model reproduces the rise of the local exponent towards 1 seen in untrained networks",
          "local exponent rises with t", ("untrained_vs_relay",),
          "Every layer >= 2 of a small untrained network. " + criteria.RISE_CRITERION, _exponent_rise),
)


def main() -> None:
    args = parse_experiment_args(experiment_parser(__doc__, "untrained_vs_relay", PROFILES))
    result = run(args.profile, args.out, args.seed)
    for row in result["layers"]:
        picks = [int(i) for i in np.searchsorted(row["t"], [100, 1000]) if i < len(row["t"])]
        cells = [f"t={row['t'][i]:.0f}: network {row['network'][i]:.2f}, relay {row['relay'][i]:.2f}, "
                 f"relay+residual {row['relay_residual'][i]:.2f}" for i in picks]
        print(f"layer {row['layer']}: " + "; ".join(cells))


if __name__ == "__main__":
    main()
