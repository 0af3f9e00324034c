"""Cancelling dilution with a logit bias stops the decay (paper: it stops early in training and
reverses after; without it trained models forget with alpha ~ 0.55 to 0.7).

Trains the same model twice on the embedded corpus, without and with the prompt logit bias of
docs/definitions.md#logit-bias (``gamma * log(i / P)`` on the first P keys of
every window, P = 16), and
measures alpha per layer at several steps on held-out text pairs.

    python experiments/logit_bias.py --out results/logit_bias
    python experiments/logit_bias.py --profile full --out results/logit_bias

The claims are judged (at the end of this file) inside the training context, t in [32, C - P], where
the models have seen such positions: at every measured step the last layer's alpha of both runs
with its interval, and the paired interval of their difference (bias minus no bias: both runs are
measured on the same pairs, ``fit.paired_alpha_difference``).

Writes ``no_bias/`` and ``bias/`` (training runs with offsets_step<s>.npz), ``summary.json`` and
``logit_bias.png`` (alpha against step for both; offset curves at an early and the last
checkpoint), drawn from the saved files.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, NotRequired, TypedDict

import numpy as np
from matplotlib.figure import Figure

import nohair_jax as nh
from nohair_jax import criteria
from nohair_jax.claims import NOT_MEASURED, Claim, Judgement, Record, part_claims_text
from nohair_jax.config import default_config
from nohair_jax.fit import FitRefused, PowerLawFit, alphas, bonferroni, fit_from_dict, paired_difference_or_refuse
from nohair_jax.experiments import experiment_parser, parse_experiment_args
from nohair_jax.results import load_json, save_figure, save_json
from nohair_jax.train import TrainConfig, alpha_history, offsets_callback, train

PROFILES = {
    "smoke": dict(d_model=32, depth=2, steps=30, batch_size=2, context=32, prompt_len=4, length=128, n_pairs=2,
                  measure_at=(0, 1, 10, 30)),
    "quick": dict(d_model=128, depth=4, steps=300, batch_size=8, context=256, prompt_len=16, length=1024, n_pairs=8,
                  measure_at=(0, 15, 25, 50, 100, 200, 300)),
    "full": dict(d_model=256, depth=6, steps=5000, batch_size=32, context=512, prompt_len=16, length=8192, n_pairs=32,
                 measure_at=(0, 100, 250, 500, 1000, 2000, 3500, 5000)),
}
RUNS = {"no_bias": None, "bias": 1.0}
T_MIN = 32  # the in-context fits' window start: t in [T_MIN, C - P]
TRAINED_RANGE = (0.55, 0.7)  # the paper's alpha of trained models without the bias


class Run(TypedDict):
    """One training run (with or without the bias): alpha per layer at each measured step and the
    held-out loss's plateau (``train.held_out_plateau``, None without history)."""

    plateau: Record | None
    gamma: NotRequired[float | None]
    model: NotRequired[dict]
    steps: NotRequired[list[int]]
    alpha: NotRequired[list[list[float | None]]]
    bits_per_byte: NotRequired[float]
    wall_s: NotRequired[float]


class Step(TypedDict):
    """One measured step, inside the training context: the last layer's fit of each run and the
    difference bias minus no bias (``PowerLawFit`` / ``AlphaDifference`` records, or ``FitRefused``'s)."""

    step: int
    bias: Record
    no_bias: Record
    difference: Record


class InContext(TypedDict):
    t_max: int
    steps_total: int
    rows: list[Step]


class Runs(TypedDict):
    bias: Run
    no_bias: Run


class Summary(TypedDict):
    """What ``run`` saves in summary.json and the claims read (``claims.check_summary``); ``seeds``: the
    seeds trained (one today: the trained rows need three)."""

    seeds: list[int]
    runs: Runs
    in_context: InContext
    profile: NotRequired[str]
    settings: NotRequired[dict]


def run(profile: str, out: Path, seed: int = 0, settings: dict | None = None) -> Summary:
    p = dict(PROFILES[profile], **(settings or {}))
    corpus = nh.stdlib_corpus()
    pairs = nh.heldout_prompt_pairs(corpus, 1, p["n_pairs"], p["prompt_len"], p["length"])
    train_cfg = TrainConfig(steps=p["steps"], batch_size=p["batch_size"], context=p["context"], seed=seed,
                            warmup_steps=p["steps"] // 10, eval_every=p["steps"] // 3,
                            checkpoint_every=max(10, p["steps"] // 30 * 10), log_every=10)  # a multiple of log_every
    runs = {}
    for name, gamma in RUNS.items():
        start = time.perf_counter()
        bias = None if gamma is None else nh.PromptLogitBias(p["prompt_len"], gamma)
        model_cfg = default_config(p["depth"], d_model=p["d_model"], position="rope", prompt_logit_bias=bias)
        result = train(model_cfg, train_cfg, corpus, out / name,
                       callbacks=[(p["measure_at"], offsets_callback(pairs, save_dir=out / name))])
        steps, alpha = alpha_history(result.history)
        bits = [e["eval_bits_per_byte"] for e in result.history if "eval_bits_per_byte" in e][-1]
        runs[name] = Run(gamma=gamma, model=model_cfg.to_dict(), steps=steps, alpha=alpha, bits_per_byte=bits,
                          plateau=nh.held_out_plateau(result.history),
                          wall_s=time.perf_counter() - start)
    summary = Summary(profile=profile, settings=p, seeds=[seed], runs=Runs(**runs), in_context=in_context(out, p, runs))
    save_json(out / "summary.json", summary)
    draw(out)
    return summary


def in_context(out: Path, p: dict, runs: dict) -> InContext:
    """At every measured step, inside the training context (t in [T_MIN, C - P]): the last layer's fit
    of each run and the paired interval of alpha(bias) - alpha(no bias) (both runs measure the same pairs),
    refitted from the saved curves."""
    t_max = p["context"] - p["prompt_len"]
    rows = []
    for step in runs["bias"]["steps"]:
        curves = {}
        for name in RUNS:
            with np.load(out / name / f"offsets_step{step}.npz") as data:
                curves[name] = (data["t"], data["l2"][:, -1], data["floor"][-1] if "floor" in data else None)
        (t, bias, floor_b), (_, plain, floor_p) = curves["bias"], curves["no_bias"]
        row = Step(step=int(step))
        for name, (_, l2, floor) in curves.items():
            row[name] = nh.fit_or_refuse(t, l2, t_min=T_MIN, t_max=t_max, floor=floor).to_dict()
        row["difference"] = paired_difference_or_refuse(t, bias, plain, t_min=T_MIN, t_max=t_max, floor_a=floor_b,
                                                        floor_b=floor_p).to_dict()
        rows.append(row)
    return InContext(t_max=t_max, steps_total=p["steps"], rows=rows)


def draw(out: Path) -> None:
    summary = load_json(out / "summary.json")
    p = summary["settings"]
    fig = Figure(figsize=(16, 4.4))
    ax_alpha, *ax_curves = fig.subplots(1, 3)
    for name, style in (("no_bias", "C0"), ("bias", "C3")):
        r = summary["runs"][name]
        alpha = np.asarray(r["alpha"], dtype=float)
        ax_alpha.plot(r["steps"], alpha[:, -1], "o-", color=style, label=f"{name}, layer {p['depth']}")
        ax_alpha.plot(r["steps"], alpha[:, 0], "o:", color=style, ms=3, label=f"{name}, layer 1")
        early, late = r["steps"][1], r["steps"][-1]
        for ax, step in zip(ax_curves, (early, late)):
            data = np.load(out / name / f"offsets_step{step}.npz")
            ax.loglog(data["t"], nh.summary_curve(data["l2"][:, -1]), color=style, label=f"{name}, step {step}")
    ax_alpha.axhline(0, color="grey", lw=0.8)
    ax_alpha.set(xlabel="training step", ylabel="alpha (t in [32, T])", title="alpha against training step")
    ax_alpha.legend(fontsize=7)
    for ax, when in zip(ax_curves, ("early", "last")):
        ax.set(xlabel="t", ylabel=f"offset, layer {p['depth']}", title=f"offsets at the {when} checkpoint")
        ax.legend(fontsize=8)
    position = summary["runs"]["bias"]["model"]["position"]
    fig.suptitle(f"the dilution-cancelling logit bias (gamma = 1, P = {p['prompt_len']}) during training; "
                 f"{position} positions, context {p['context']}")
    fig.tight_layout()
    save_figure(out / "logit_bias.png", fig)


# ---------------------------------------------------------------- the claims this part measures


EARLY_FRACTION = 0.05  # "early in training": the first 5 % of the steps


def _bias_evidence(ic: InContext) -> dict:
    return dict(window=[T_MIN, ic["t_max"]], steps=[r["step"] for r in ic["rows"]],
                **{name: alphas(criteria.read_fits([r[name] for r in ic["rows"]])) for name in ("bias", "no_bias")},
                **{f"{name}_interval": [criteria.alpha_interval(f) for f in criteria.read_fits([r[name] for r in ic["rows"]])]
                   for name in ("bias", "no_bias")},
                difference_interval=[criteria.difference_ci(fit_from_dict(r["difference"])) for r in ic["rows"]])


def _bias_last_step(run: str, accept: Callable[[PowerLawFit], bool]):
    """Judge one run's (``bias`` or ``no_bias``) last-layer fit at the last measured step with ``accept(fit)``."""
    def judge(summary: Summary):
        ic = summary["in_context"]
        last = ic["rows"][-1]
        fit = fit_from_dict(last[run])
        if isinstance(fit, FitRefused):
            return criteria.unmeasured(fit.reason, **_bias_evidence(ic))
        text = f"{fit.alpha:.2f} (last layer, step {last['step']}, t in {list(fit.t_range)}, inside the training context)"
        short = criteria.short_of_trained([summary["runs"][run] for _ in summary["seeds"]])
        if short:
            return criteria.unmeasured(f"{text}; not trained enough to judge: {short}", **_bias_evidence(ic))
        return criteria.judged(text, criteria.alpha_interval(fit), accept(fit), **_bias_evidence(ic))
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
    ic = summary["in_context"]
    rows, evidence = ic["rows"], _bias_evidence(ic)
    early = [r for r in rows if 0 < r["step"] <= EARLY_FRACTION * ic["steps_total"]]
    if not early:
        return criteria.unmeasured(f"no step measured after step 0 in the first {EARLY_FRACTION:.0%} of the "
                                   f"{ic['steps_total']} steps (measured: {[r['step'] for r in rows]})", **evidence)
    stopped = [r["step"] for r in early if _stopped(r)]
    decaying = [r["step"] for r in early if _still_decays(r, len(early))]
    intervals = {name: "; ".join(f"step {r['step']}: {fit_from_dict(r[name]).brief()}" for r in early)
                 for name in ("bias", "no_bias")}
    text = (f"early steps, last layer: with the bias {intervals['bias']}; without {intervals['no_bias']}; stopped "
            f"(with the bias inside +-{criteria.EQUIVALENCE_MARGIN:g}, without above it) at {stopped or 'no early step'}"
            f"; with the bias still decaying beyond doubt at {decaying or 'no early step'}")
    verdict = "agree" if len(stopped) == len(early) else "disagree" if decaying else NOT_MEASURED
    return Judgement(text, None, verdict, dict(evidence, stopped=stopped, decaying=decaying))


CLAIMS = (
    Claim("no_bias_trained", "Without the logit bias, trained models forget (last layer, last step)",
          "alpha {:g} to {:g}".format(*TRAINED_RANGE), ("logit_bias",),
          f"The model trained without the bias, at the last measured step, alpha on t in [{T_MIN}, C - P] inside its "
          f"training context C. {criteria.range_criterion(*TRAINED_RANGE)} " + criteria.TRAINED_CRITERION,
          _bias_last_step("no_bias", lambda f: criteria.overlaps(f, *TRAINED_RANGE))),
    Claim("bias_stops_decay", "Cancelling dilution with a logit bias stops the decay early in training", "alpha ~ 0",
          ("logit_bias",), "The same model trained with and without the bias (same seed, same pairs), the last layer's "
          f"alpha on t in [{T_MIN}, C - P] at every measured step after step 0 in the first {EARLY_FRACTION:.0%} of "
          "training, each with its 95 % t-interval over pairs. Stopped at a step: the biased alpha's interval lies inside "
          f"the equivalence margin +-{criteria.EQUIVALENCE_MARGIN:g} while the unbiased alpha's lies above "
          f"{criteria.EQUIVALENCE_MARGIN:g}. Agree if it is stopped at every such step; disagree if at some such step "
          "the biased alpha's interval, widened for the number of steps (Bonferroni), lies above the margin; "
          "otherwise not measured (also where no step that early was measured).", _bias_stops),
    Claim("bias_reverses", "With the logit bias the decay reverses later in training (offsets grow)", "alpha < 0",
          ("logit_bias",), f"The model trained with the bias, at the last measured step, alpha on t in [{T_MIN}, C - P]. "
          "Agree if its interval lies entirely below 0, disagree otherwise. " + criteria.TRAINED_CRITERION,
          _bias_last_step("bias", lambda f: criteria.alpha_interval(f) is not None and criteria.alpha_interval(f)[1] < 0)),
)


def main() -> None:
    args = parse_experiment_args(experiment_parser(__doc__, "logit_bias", PROFILES))
    summary = run(args.profile, args.out, args.seed)
    for name, r in summary["runs"].items():
        print(f"{name}: held-out bits per byte {r['bits_per_byte']:.3f}, {r['wall_s'] / 60:.1f} min")
        for step, row in zip(r["steps"], r["alpha"]):
            print(f"  step {step:>5}: alpha per layer " + ", ".join(f"{a:.2f}" for a in row))
    print(part_claims_text(CLAIMS, summary))


if __name__ == "__main__":
    main()
