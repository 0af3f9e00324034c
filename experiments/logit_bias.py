"""Cancelling dilution with a logit bias stops the decay (paper: it stops early in training and
reverses after; without it trained models forget with alpha ~ 0.55 to 0.7: the unbiased runs are
trained_vs_untrained's, whose ``trained_alpha`` row judges that part of the statement).

Trains the same model twice per seed on the embedded corpus, without and with the prompt logit bias of
docs/definitions.md#logit-bias (``gamma * log(i / P)`` on the first P keys of every window, P = 16),
each until its held-out loss levels off (``experiments.small_run``: doubling stages, the rule of
``nohair_jax.plateau``), and measures alpha per layer on held-out text pairs at step 0, at a few early
steps and at every stage's end.

    python experiments/logit_bias.py --out results/logit_bias
    python experiments/logit_bias.py --profile full --out results/logit_bias

The claims are judged (at the end of this file) inside the training context, t in [32, C - P], where
the models have seen such positions: at every step measured in both runs of a seed the last layer's
alpha of both with its interval, and the paired interval of their difference (bias minus no bias: both
runs are measured on the same pairs, ``fit.paired_alpha_difference``); each seed judged on its own, a
verdict only where every seed gives it.

The training runs (with offsets_step<s>.npz) live beside the part's folder, the unbiased ones shared
with trained_vs_untrained (``experiments.small_run``); the part writes ``summary.json`` and
``logit_bias.png`` (alpha against step for both runs of the first seed; offset curves at an early step
and at the stop), drawn from the saved files. ``--seed`` trains that seed
alone (default: the profile's seeds).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable, NotRequired, TypedDict

import numpy as np
from matplotlib.figure import Figure

import nohair_jax as nh
from nohair_jax import criteria
from nohair_jax.parts import Part
from nohair_jax.claims import NOT_MEASURED, Claim, Judgement, PartSummary, Record, part_claims_text
from nohair_jax.fit import FitRefused, PowerLawFit, bonferroni, fit_from_dict, paired_difference_or_refuse
from nohair_jax.experiments import SMALL_TRAINING, experiment_parser, parse_experiment_args, small_run, write_summary
from nohair_jax.results import load_json, save_figure
from nohair_jax.train import alpha_history

# The model, its staged training and its measurement: experiments.SMALL_TRAINING (shared with trained_vs_untrained,
# whose unbiased runs are these: experiments.small_run); ``measure_at``, the early steps measured besides step 0
# and every stage's end, are what the bias-stops row reads (steps in the first EARLY_FRACTION of training).
PROFILES = {
    "smoke": dict(SMALL_TRAINING["smoke"], seeds=(0,)),
    "quick": dict(SMALL_TRAINING["quick"], seeds=(0,)),
    "full": dict(SMALL_TRAINING["full"], seeds=(0, 1, 2)),
}

PART = Part(order=9, title="The dilution-cancelling logit bias during training", figures=("logit_bias.png",),
            about="The same model trained without and with the prompt logit bias, alpha measured along training.",
            full=("full", {}), seconds=50)  # 3 seeds, each trained until its held-out loss levels off; "quick": one seed, capped

RUNS = {"bias": 1.0, "no_bias": None}  # name: gamma
T_MIN = 32  # the in-context fits' window start: t in [T_MIN, C - P]


class Run(TypedDict):
    """One training run (a seed, with or without the bias): alpha per layer at each measured step (on [T_MIN, T]),
    the steps trained (``stop``), the training run's folder relative to the part's (``experiments.small_run``),
    the stopping rule's verdict there (``plateau.Verdict.to_dict``) and the last layer's fit inside the training
    context at the stop (``PowerLawFit`` record or ``FitRefused``'s)."""

    seed: int
    stop: int
    folder: str
    plateau: Record | None
    at_stop: Record
    gamma: NotRequired[float | None]
    model: NotRequired[dict]
    steps: NotRequired[list[int]]
    alpha: NotRequired[list[list[float | None]]]
    bits_per_byte: NotRequired[float]
    wall_s: NotRequired[float]


class Step(TypedDict):
    """One step measured in both runs of a seed, inside the training context: the last layer's fit of each run
    and the difference bias minus no bias (``PowerLawFit`` / ``AlphaDifference`` records, or ``FitRefused``'s)."""

    step: int
    bias: Record
    no_bias: Record
    difference: Record


class SeedSteps(TypedDict):
    seed: int
    rows: list[Step]


class InContext(TypedDict):
    t_max: int
    seeds: list[SeedSteps]


class Runs(TypedDict):
    """Per seed, in the order of ``Summary.seeds``."""

    bias: list[Run]
    no_bias: list[Run]


class Summary(PartSummary):
    """What ``run`` saves in summary.json and the claims read (``claims.check_summary``)."""

    seeds: list[int]
    runs: Runs
    in_context: InContext


def run(profile: str, out: Path, seed: int | None = None, settings: dict | None = None) -> Summary:
    p = dict(PROFILES[profile], **(settings or {}))
    seeds = list(p["seeds"] if seed is None else (seed,))
    t_max = p["context"] - p["prompt_len"]
    runs = {name: [] for name in RUNS}
    for name, gamma in RUNS.items():  # the biased runs first: trained_vs_untrained, beside, may train the others
        for s in seeds:
            start = time.perf_counter()
            folder, result, verdict = small_run(out, p, s, gamma)
            steps, alpha = alpha_history(result.history)
            runs[name].append(Run(seed=s, stop=verdict.step, folder=os.path.relpath(folder, out),
                                  plateau=verdict.to_dict(), at_stop=_last_layer_fit(folder, verdict.step, t_max), gamma=gamma,
                                  model=result.model.config.to_dict(), steps=steps, alpha=alpha,
                                  bits_per_byte=verdict.bits, wall_s=time.perf_counter() - start))
    seed_steps = [SeedSteps(seed=s, rows=in_context(out, t_max, bias_run, plain_run))
                  for s, bias_run, plain_run in zip(seeds, runs["bias"], runs["no_bias"])]
    summary = Summary(profile=profile, settings=p, seeds=seeds, runs=Runs(no_bias=runs["no_bias"], bias=runs["bias"]),
                      in_context=InContext(t_max=t_max, seeds=seed_steps))
    return write_summary(out, summary, draw)


def _curve(folder: Path, step: int):
    """The last layer's offsets saved at ``step``: t [T], l2 [n_pairs, T], its noise floor."""
    with np.load(folder / f"offsets_step{step}.npz") as data:
        return data["t"], data["l2"][:, -1], data["floor"][-1]


def _last_layer_fit(folder: Path, step: int, t_max: int) -> dict:
    t, l2, floor = _curve(folder, step)
    return nh.fit_or_refuse(t, l2, t_min=T_MIN, t_max=t_max, floor=floor).to_dict()


def in_context(out: Path, t_max: int, bias_run: Run, plain_run: Run) -> list[Step]:
    """At every step measured in both runs of one seed (their folders relative to the part's, ``out``), inside
    the training context (t in [T_MIN, t_max]): the last layer's fit of each run and the paired interval of
    alpha(bias) - alpha(no bias) (both runs measure the same pairs), refitted from the saved curves."""
    rows = []
    bias_dir, plain_dir = out / bias_run["folder"], out / plain_run["folder"]
    for step in sorted(set(bias_run["steps"]) & set(plain_run["steps"])):
        (t, bias, floor_b), (_, plain, floor_p) = _curve(bias_dir, step), _curve(plain_dir, step)
        rows.append(Step(step=int(step), bias=_last_layer_fit(bias_dir, step, t_max),
                         no_bias=_last_layer_fit(plain_dir, step, t_max),
                         difference=paired_difference_or_refuse(t, bias, plain, t_min=T_MIN, t_max=t_max,
                                                                floor_a=floor_b, floor_b=floor_p).to_dict()))
    return rows


def draw(out: Path) -> None:
    """alpha against the training step of both runs of the first seed, and their offsets at an early and at the last
    measured step."""
    summary = load_json(out / "summary.json")
    p, seed = summary["settings"], summary["seeds"][0]
    fig = Figure(figsize=(16, 4.4))
    ax_alpha, *ax_curves = fig.subplots(1, 3)
    for name, style in (("no_bias", "C0"), ("bias", "C3")):
        r = summary["runs"][name][0]
        alpha = np.asarray(r["alpha"], dtype=float)
        ax_alpha.plot(r["steps"], alpha[:, -1], "o-", color=style, label=f"{name}, layer {p['depth']}")
        ax_alpha.plot(r["steps"], alpha[:, 0], "o:", color=style, ms=3, label=f"{name}, layer 1")
        for ax, step in zip(ax_curves, (r["steps"][1], r["stop"])):
            with np.load(out / r["folder"] / f"offsets_step{step}.npz") as data:
                ax.loglog(data["t"], nh.summary_curve(data["l2"][:, -1]), color=style, label=f"{name}, step {step}")
    ax_alpha.axhline(0, color="grey", lw=0.8)
    ax_alpha.set_xscale("symlog", linthresh=1)  # logarithmic from step 1, step 0 kept
    ax_alpha.set_xlim(left=0)
    ax_alpha.set(xlabel="training step", ylabel=f"alpha (t in [{T_MIN}, T])", title="alpha against training step")
    ax_alpha.legend(fontsize=7)
    for ax, when in zip(ax_curves, ("the first measured step after 0", "the stop")):
        ax.set(xlabel="t", ylabel=f"offset, layer {p['depth']}", title=f"offsets at {when}")
        ax.legend(fontsize=8)
    fig.suptitle(f"the dilution-cancelling logit bias (gamma = 1, P = {p['prompt_len']}) during training; seed {seed}, "
                 f"RoPE, context {p['context']}")
    fig.tight_layout()
    save_figure(out / "logit_bias.png", fig)


# ---------------------------------------------------------------- the claims this part measures


EARLY_FRACTION = 0.05  # "early in training": the first 5 % of the steps the unbiased run of the seed trained


def _bias_last_step(run: str, verdict: Callable[[PowerLawFit], str]):
    """Judge one run's (``bias`` or ``no_bias``) last-layer fit at its stop by ``verdict(fit)``, every seed."""
    def judge(summary: Summary):
        def seed(i: int) -> Judgement:
            r = summary["runs"][run][i]
            fit = fit_from_dict(r["at_stop"])
            if isinstance(fit, FitRefused):
                return criteria.unmeasured(fit.reason)
            text = f"{fit.alpha:.2f} (last layer, step {r['stop']}, t in {list(fit.t_range)}, inside the training context)"
            return criteria.decided(text, criteria.alpha_interval(fit), verdict(fit), stop=r["stop"])
        return criteria.seeds_agree(summary["seeds"], [seed(i) for i in range(len(summary["seeds"]))],
                                    summary["runs"][run])
    return judge


def _stopped(row: Step) -> bool:
    """At this step the biased run's alpha lies inside the equivalence margin of 0 while the unbiased run's
    lies above it (the same seed and pairs): the bias, not the model, stopped the decay."""
    return criteria.near_zero(fit_from_dict(row["bias"])) and criteria.clearly_decays(fit_from_dict(row["no_bias"]))


def _still_decays(row: Step, statements: int) -> bool:
    """The biased run's alpha interval, widened for ``statements`` early steps (Bonferroni), lies above the margin."""
    fit = fit_from_dict(row["bias"])
    wide = isinstance(fit, PowerLawFit) and bonferroni(fit.ci, fit.dof, statements, fit.confidence)
    return bool(wide) and wide[0] > criteria.EQUIVALENCE_MARGIN


def _bias_stops(summary: Summary):
    def seed(i: int) -> Judgement:
        rows, total = summary["in_context"]["seeds"][i]["rows"], summary["runs"]["no_bias"][i]["stop"]
        early = [r for r in rows if 0 < r["step"] <= EARLY_FRACTION * total]
        if not early:
            return criteria.unmeasured(f"no step measured after step 0 in the first {EARLY_FRACTION:.0%} of the "
                                       f"{total} steps (measured: {[r['step'] for r in rows]})")
        stopped = [r["step"] for r in early if _stopped(r)]
        decaying = [r["step"] for r in early if _still_decays(r, len(early))]
        intervals = {name: "; ".join(f"step {r['step']}: {fit_from_dict(r[name]).brief()}" for r in early)
                     for name in ("bias", "no_bias")}
        text = (f"early steps, last layer: with the bias {intervals['bias']}; without {intervals['no_bias']}; stopped "
                f"(with the bias inside +-{criteria.EQUIVALENCE_MARGIN:g}, without above it) at "
                f"{stopped or 'no early step'}; with the bias still decaying beyond doubt at {decaying or 'no early step'}")
        verdict = "agree" if len(stopped) == len(early) else "disagree" if decaying else NOT_MEASURED
        evidence = dict(window=[T_MIN, summary["in_context"]["t_max"]], steps=[r["step"] for r in early],
                        stopped=stopped, decaying=decaying,
                        difference_interval=[criteria.difference_ci(fit_from_dict(r["difference"])) for r in early])
        return Judgement(text, None, verdict, evidence)
    return criteria.seeds_agree(summary["seeds"], [seed(i) for i in range(len(summary["seeds"]))],
                                summary["runs"]["no_bias"] + summary["runs"]["bias"])


CLAIMS = (
    Claim("bias_stops_decay", "Cancelling dilution with a logit bias stops the decay early in training", "alpha ~ 0",
          ("logit_bias",), "The same model trained with and without the bias (same seed, same pairs), the last layer's "
          f"alpha on t in [{T_MIN}, C - P] at every measured step after step 0 in the first {EARLY_FRACTION:.0%} of the "
          "unbiased run's training, each with its 95 % t-interval over pairs. Stopped at a step: the biased alpha's "
          f"interval lies inside the equivalence margin +-{criteria.EQUIVALENCE_MARGIN:g} while the unbiased alpha's lies "
          f"above {criteria.EQUIVALENCE_MARGIN:g}. A seed agrees if it is stopped at every such step; disagrees if at "
          "some such step the biased alpha's interval, widened for the number of steps (Bonferroni), lies above the "
          "margin; otherwise not measured (also where no step that early was measured). " + criteria.TRAINED_CRITERION,
          _bias_stops),
    Claim("bias_reverses", "With the logit bias the decay reverses later in training (offsets grow)", "alpha < 0",
          ("logit_bias",), f"The model trained with the bias, at the step its training stopped, alpha on t in [{T_MIN}, "
          "C - P]. Agree if its interval lies entirely below 0, disagree if it lies entirely above 0, otherwise not "
          "measured. " + criteria.TRAINED_CRITERION,
          _bias_last_step("bias", lambda f: criteria.beyond(criteria.alpha_interval(f), 0.0, above=False))),
)


def main() -> None:
    parser = experiment_parser(__doc__, "logit_bias", PROFILES)
    parser.set_defaults(seed=None)
    args = parse_experiment_args(parser)
    summary = run(args.profile, args.out, args.seed)
    for name, runs in summary["runs"].items():
        for r in runs:
            print(f"{name}, seed {r['seed']}: {r['stop']} steps, held-out bits per byte {r['bits_per_byte']:.3f}, "
                  f"{r['wall_s'] / 60:.1f} min; {r['plateau']['reason']}")
            for step, row in zip(r["steps"], r["alpha"]):
                print(f"  step {step:>5}: alpha per layer " + ", ".join(f"{a:.2f}" for a in row))
    print(part_claims_text(CLAIMS, summary))


if __name__ == "__main__":
    main()
