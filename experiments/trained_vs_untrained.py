"""Trained models forget faster than untrained ones (paper: alpha ~ 0.55 to 0.7 trained,
~ 0.2 to 0.5 untrained).

Trains the small byte-level model of ``experiments.SMALL_TRAINING`` (RoPE) on the embedded stdlib
corpus until its held-out loss levels off (doubling stages, the rule of ``nohair_jax.plateau``),
measures prompt-pair offsets on prompts and continuations cut from held-out text at initialisation
and after training (same architecture, same seed, same pairs), fits alpha per layer above the
float32 noise floor, and draws offsets, local exponents and the next-token KL of both on one figure.

    python experiments/trained_vs_untrained.py --out results/trained_vs_untrained            # quick, CPU
    python experiments/trained_vs_untrained.py --profile full --out results/trained_vs_untrained

Alpha is fitted on
two windows of the same curves: t in [32, T] (mostly beyond the training context) and t in
[32, context - P] (inside it, where the model has seen such positions). The bound is checked on
the trained model inside its context (``bound.check_bound``: conditions, explicit bound, shape
test; ``seed<k>/bound/``). The training runs (config, history, checkpoints, offsets_step<s>.npz) live
beside the part's folder, shared with logit_bias (``experiments.small_run``); the part writes
``seed<k>/bound/``, ``summary.json`` and ``trained_vs_untrained.png`` drawn from them. Offsets are also measured beyond the training context: RoPE extrapolates
(docs/training.md), and the summary records the training context next to every alpha.
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
from nohair_jax.bound import BoundRow, NotApplicable, check_bound, check_row, explicit_from_saved
from nohair_jax.fit import FitRefused, PowerLawFit, alphas, fit_from_dict, paired_difference_or_refuse
from nohair_jax.parts import Part
from nohair_jax.claims import Claim, Judgement, Record, part_claims_text
from nohair_jax.experiments import SMALL_TRAINING, experiment_parser, parse_experiment_args, small_run, write_summary
from nohair_jax.results import load_json, save_figure

# The model and its staged training: experiments.SMALL_TRAINING (shared with logit_bias).
PROFILES = {
    "smoke": dict(SMALL_TRAINING["smoke"], seeds=(0,)),
    "quick": dict(SMALL_TRAINING["quick"], seeds=(0,)),
    "full": dict(SMALL_TRAINING["full"], seeds=(0, 1, 2)),
}

PART = Part(order=8, title="Trained versus untrained", figures=("trained_vs_untrained.png",),
            about="A byte-level model trained on the embedded corpus, measured before and after training on held-out "
                  "text.",
            full=("full", {}), seconds=50)  # 3 seeds, each trained until its held-out loss levels off; "quick": one seed, capped

TRAINED_RANGE = criteria.TRAINED_RANGE
PAPER = dict(trained=TRAINED_RANGE, untrained=criteria.UNTRAINED_RANGE)


class Run(TypedDict):
    """One seed: alpha per layer before and after training (beyond the context and inside it), their
    difference inside it (``PowerLawFit`` / ``AlphaDifference`` records, or ``FitRefused``'s), the bound
    on the trained model, the steps trained (``stop``), the stopping rule's verdict there
    (``plateau.Verdict.to_dict``) and the training run's folder (``experiments.small_run``), relative to the part's."""

    seed: int
    stop: int
    folder: str
    trained: list[Record]
    trained_in_context: list[Record]
    trained_minus_untrained_in_context: list[Record]
    bound: BoundRow
    plateau: Record | None
    untrained: NotRequired[list[Record]]
    untrained_in_context: NotRequired[list[Record]]
    bits_per_byte: NotRequired[float]
    wall_s: NotRequired[float]


class Settings(TypedDict):
    max_steps: int
    context: int


class Summary(TypedDict):
    """What ``run`` saves in summary.json and the claims read (``claims.check_summary``)."""

    settings: Settings
    runs: list[Run]
    profile: NotRequired[str]
    model: NotRequired[dict]
    corpus: NotRequired[dict]
    paper: NotRequired[dict]


def run(profile: str, out: Path, seeds: tuple[int, ...] | None = None, settings: dict | None = None) -> Summary:
    p = dict(PROFILES[profile], **(settings or {}))
    p["seeds"] = tuple(seeds or p["seeds"])
    pairs = nh.heldout_prompt_pairs(nh.stdlib_corpus(), 1, p["n_pairs"], p["prompt_len"], p["length"])
    runs = []
    for seed in p["seeds"]:
        start = time.perf_counter()
        run_dir, result, verdict = small_run(out, p, seed)
        stop = verdict.step
        measured = {e["step"]: e["offset_fits"] for e in result.history if "offset_fits" in e}  # on [32, T]
        in_context, curves = {}, {}
        for step in (0, stop):
            with np.load(run_dir / f"offsets_step{step}.npz") as data:
                curves[step] = (data["t"], data["l2"], data["floor"])
            in_context[step] = [fit.to_dict() for fit in nh.fit_layers(*curves[step], t_max=p["context"] - p["prompt_len"])]
        # The bound on the trained model, inside its training context: conditions, explicit bound, shape test.
        inside = nh.PromptPairs(pairs.prompts_a, pairs.prompts_b, pairs.continuations[:, : p["context"] - p["prompt_len"]])
        bound = check_row(check_bound(result.model, inside, out / f"seed{seed}" / "bound", seed=seed, progress=False,
                                      meta=dict(experiment="trained_vs_untrained", step=stop)))
        runs.append(Run(seed=seed, stop=stop, folder=os.path.relpath(run_dir, out), untrained=measured[0],
                        trained=measured[stop], bound=bound, untrained_in_context=in_context[0], trained_in_context=in_context[stop],
                        trained_minus_untrained_in_context=_differences(curves[stop], curves[0], p),
                        bits_per_byte=verdict.bits, plateau=verdict.to_dict(), wall_s=time.perf_counter() - start))
    summary = Summary(profile=profile, settings=p, model=result.model.config.to_dict(),
                      corpus=nh.stdlib_corpus().to_dict(), paper=PAPER, runs=runs)
    return write_summary(out, summary, draw)


def _differences(trained, untrained, p: dict) -> list[dict]:
    """Per layer, alpha after training minus alpha at initialisation inside the training context, one
    paired interval on the difference (both are measured on the same pairs, in order:
    ``fit.paired_difference_or_refuse``): a FitRefused's dict where refused."""
    (t, l2_trained, floor_trained), (_, l2_untrained, floor_untrained) = trained, untrained
    return [paired_difference_or_refuse(t, l2_trained[:, layer], l2_untrained[:, layer],
                                        t_max=p["context"] - p["prompt_len"], floor_a=floor_trained[layer],
                                        floor_b=floor_untrained[layer]).to_dict()
            for layer in range(1, l2_trained.shape[1])]


def draw(out: Path) -> None:
    summary = load_json(out / "summary.json")
    p, (seed, stop, folder) = summary["settings"], (summary["runs"][0][k] for k in ("seed", "stop", "folder"))
    before = np.load(out / folder / "offsets_step0.npz")
    after = np.load(out / folder / f"offsets_step{stop}.npz")
    fig = Figure(figsize=(16, 4.4))
    ax_off, ax_loc, ax_kl = fig.subplots(1, 3)
    for layer in range(1, p["depth"] + 1):
        color = f"C{layer - 1}"
        for data, style, name in ((after, "-", "trained"), (before, "--", "untrained")):
            ax_off.loglog(data["t"], nh.summary_curve(data["l2"][:, layer]), style, color=color,
                          label=f"layer {layer}, {name}" if layer in (1, p["depth"]) else None)
            ax_loc.semilogx(*nh.local_exponent(data["t"], data["l2"][:, layer]), style, color=color)
    for data, style, name in ((after, "k-", "trained"), (before, "k--", "untrained")):
        kl = nh.summary_curve(np.maximum(data["kl"], 1e-30))
        ax_kl.loglog(data["t"], kl, style, label=name)
    ax_off.set(xlabel="t", ylabel="offset (mean over pairs)", title="offsets: trained solid, untrained dashed")
    ax_off.legend(fontsize=7)
    ax_loc.axhline(1, color="grey", lw=0.8)
    ax_loc.set(xlabel="t", ylabel="local exponent", title="local exponent per layer")
    ax_kl.set(xlabel="t", ylabel="KL(p_a || p_b), nats", title="next-token KL divergence")
    ax_kl.legend(fontsize=8)
    fig.suptitle(f"trained (seed {seed}, {stop} steps, context {p['context']}, RoPE) vs untrained; "
                 f"held-out text pairs, P = {p['prompt_len']}")
    fig.tight_layout()
    save_figure(out / "trained_vs_untrained.png", fig)


# ---------------------------------------------------------------- the claims this part measures


def _trained_enough(judge_run: Callable[[Run, Settings], Judgement]):
    """A judge of the small trained models: ``judge_run(run, settings)`` on every seed's run, one verdict where
    the models count as trained and the seeds agree (``criteria.seeds_agree``)."""
    def judge(part: Summary):
        return criteria.seeds_agree([r["seed"] for r in part["runs"]],
                                    [judge_run(run, part["settings"]) for run in part["runs"]], part["runs"])
    return judge


def _trained(run: Run, p: Settings):
    fit, beyond = fit_from_dict(run["trained_in_context"][-1]), fit_from_dict(run["trained"][-1])
    if isinstance(fit, FitRefused):
        return criteria.unmeasured(fit.reason)
    beyond_window = list(beyond.t_range) if isinstance(beyond, PowerLawFit) else None
    text = (f"{fit.alpha:.2f} (last layer, t in {list(fit.t_range)}, inside the {p['context']}-token training context); "
            f"{criteria.alpha_text(beyond)} on t in {beyond_window}, extrapolating; {run['stop']} steps")
    return criteria.decided(text, criteria.alpha_interval(fit), criteria.in_range(fit, *TRAINED_RANGE),
                           last_layer_interval=criteria.alpha_interval(fit),
                           window=list(fit.t_range), extrapolated=alphas([beyond])[0], steps=run["stop"])


def _trained_faster(run: Run, p: Settings):
    diffs = criteria.read_differences(run["trained_minus_untrained_in_context"])
    if not diffs or not criteria.all_with_interval(diffs):
        return criteria.unmeasured("the difference could not be fitted with an interval in every layer",
                                   errors=criteria.refusals(diffs))
    text = "; ".join(f"layer {k}: {d.brief()}" for k, d in enumerate(diffs, start=1))
    verdict, _, slower = criteria.every_above_zero(diffs)
    return Judgement(f"trained minus untrained alpha inside the training context (t in {list(diffs[0].t_range)}): "
                     f"{text}; below 0 after a Bonferroni correction over {len(diffs)} layers: {slower or 'none'}", None,
                     verdict, dict(difference=[d.difference for d in diffs], intervals=[criteria.difference_ci(d) for d in diffs]))


def _trained_bound(summary: Summary):
    rows = [r["bound"] for r in summary["runs"]]
    failures = [f for r in rows for f in r["failures"]]
    applies = [c for c in (explicit_from_saved(r["explicit"]) for r in rows) if not isinstance(c, NotApplicable)]
    shape = criteria.shape_test([e for r in rows for e in r["shape"]])
    evidence = dict(logit_bound=[r["logit_bound"] for r in rows],
                    sigma_min_over_sqrt_eps=[r["sigma_min_over_floor"] for r in rows],
                    failures=failures, margins=[e.margin for c in applies for e in c],
                    **(shape[3] if shape else {}))
    short = criteria.short_of_trained(summary["runs"])
    if short:
        return criteria.unmeasured(f"not trained enough to judge: {short}", **evidence)
    if failures:
        return criteria.judged(f"a condition fails: {failures[0]}", None, False, **evidence)
    if len(applies) < len(rows) or shape is None:
        return criteria.unmeasured("the explicit bound or the shape test could not be computed on every trained model", **evidence)
    holds = all(e.holds for c in applies for e in c)
    text = (f"largest logit B = {max(max(b) for b in evidence['logit_bound']):.3g}, smallest sigma_min = "
            f"{min(evidence['sigma_min_over_sqrt_eps']):.3g} x sqrt(eps); explicit bound "
            f"{'above every' if holds else 'below some'} offset (smallest margin {min(evidence['margins']):.3g}); "
            f"{shape[0]}")
    verdict = shape[2] if holds else "disagree"
    return Judgement(text, shape[1], verdict, evidence)


CLAIMS = (
    Claim("trained_alpha", "Trained models forget fast (small byte-level model trained minutes on a CPU)",
          "alpha {:g} to {:g}".format(*TRAINED_RANGE), ("trained_vs_untrained",),
          "The small byte-level model after training, held-out text pairs; alpha fitted on t in [32, C - P], inside its "
          "training context C (the fit beyond it, where RoPE extrapolates, is reported beside). "
          f"{criteria.range_criterion(*TRAINED_RANGE)} " + criteria.TRAINED_CRITERION,
          _trained_enough(_trained)),
    Claim("trained_faster", "Trained models forget faster than untrained ones (small byte-level model; every layer, "
          "interval of the difference above 0)", "alpha trained > untrained", ("trained_vs_untrained",),
          "Per layer, alpha after training minus alpha at its initialisation on the same pairs, on t in [32, C - P] "
          f"inside the training context C, with {criteria.PAIRED_CRITERION}. {criteria.ABOVE_ZERO_CRITERION} "
          + criteria.TRAINED_CRITERION, _trained_enough(_trained_faster)),
    Claim("trained_bound", "The bound applies to and holds on a trained model (small byte-level model, inside its "
          "training context)", "conditions hold; offset <= bound", ("trained_vs_untrained",),
          "The small model after training, held-out text pairs cut to its training context (t <= C - P): the "
          "conditions as above, the explicit bound from them against every offset, and the shape test (slope of "
          "offset / relay shape on [T/16, T]). Agree if the conditions hold, the bound is at or above every offset and "
          f"{criteria.SHAPE_AGREE}; disagree if a condition fails, the bound is below some offset or "
          f"{criteria.SHAPE_DISAGREE}; otherwise not measured (as where the bound or the shape test cannot be "
          "computed). " + criteria.TRAINED_CRITERION, _trained_bound),
)


def main() -> None:
    parser = experiment_parser(__doc__, "trained_vs_untrained", PROFILES, seed=False)
    parser.add_argument("--seeds", type=int, nargs="+", default=None,
                        help="training seeds (default: the profile's); finished seeds are reused, not retrained")
    args = parse_experiment_args(parser)
    summary = run(args.profile, args.out, args.seeds)
    for r in summary["runs"]:
        print(f"seed {r['seed']}: {r['stop']} steps, held-out bits per byte {r['bits_per_byte']:.3f}, "
              f"{r['wall_s'] / 60:.1f} min; {r['plateau']['reason']}")
        for key in ("untrained", "trained", "untrained_in_context", "trained_in_context"):
            print(f"  {key + ' alpha per layer:':<38}" + "; ".join(nh.fit_from_dict(f).brief() for f in r[key]))
    print(part_claims_text(CLAIMS, summary))


if __name__ == "__main__":
    main()
