"""Trained models forget faster than untrained ones (paper: alpha ~ 0.55 to 0.7 trained,
~ 0.2 to 0.5 untrained).

Trains the default byte-level model (4 layers, d_model 128, RoPE) on the embedded stdlib
corpus, measures prompt-pair offsets on prompts and continuations cut from held-out text at
initialisation and after training (same architecture, same seed, same pairs), fits alpha per
layer above the float32 noise floor, and draws offsets, local exponents and the next-token KL
of both on one figure.

    python experiments/trained_vs_untrained.py --out results/trained_vs_untrained            # quick, CPU
    python experiments/trained_vs_untrained.py --profile full --out results/trained_vs_untrained

``--position none`` trains without position encoding (causal masking alone). Alpha is fitted on
two windows of the same curves: t in [32, T] (mostly beyond the training context) and t in
[32, context - P] (inside it, where the model has seen such positions). The bound is checked on
the trained model inside its context (``bound.check_bound``: conditions, explicit bound, shape
test; ``seed<k>/bound/``). Writes ``seed<k>/`` (the training run: config, history, checkpoints, offsets_step<s>.npz),
``summary.json`` and ``trained_vs_untrained.png`` drawn from them. Offsets are measured at T in
the thousands, beyond the training context: RoPE extrapolates (docs/training.md), and the
summary records the training context next to every alpha.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, NotRequired, TypedDict

import numpy as np
from matplotlib.figure import Figure

import nohair_jax as nh
from nohair_jax import criteria
from nohair_jax.bound import BoundRow, NotApplicable, check_bound, check_row, explicit_from_saved
from nohair_jax.config import default_config
from nohair_jax.fit import FitRefused, PowerLawFit, alphas, fit_from_dict, paired_difference_or_refuse
from nohair_jax.claims import NOT_MEASURED, Claim, Judgement, Record, part_claims_text
from nohair_jax.experiments import experiment_parser, parse_experiment_args
from nohair_jax.results import load_json, save_figure, save_json
from nohair_jax.train import TrainConfig, offsets_callback, train

PROFILES = {
    "smoke": dict(seeds=(0,), d_model=32, depth=2, steps=40, batch_size=2, context=96, prompt_len=4, length=256, n_pairs=2),
    "quick": dict(seeds=(0,), d_model=128, depth=4, steps=600, batch_size=8, context=256, prompt_len=16, length=2048, n_pairs=16),
    "full": dict(seeds=(0, 1, 2), d_model=256, depth=6, steps=5000, batch_size=32, context=512, prompt_len=16, length=8192,
                 n_pairs=64),
}
TRAINED_RANGE = (0.55, 0.7)  # the paper's alpha of trained models
PAPER = dict(trained=TRAINED_RANGE, untrained=(0.2, 0.5))


class Run(TypedDict):
    """One seed: alpha per layer before and after training (beyond the context and inside it), their
    difference inside it (``PowerLawFit`` / ``AlphaDifference`` records, or ``FitRefused``'s), the bound
    on the trained model, and the held-out loss's plateau (``train.held_out_plateau``, None without history)."""

    seed: int
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
    steps: int
    context: int


class Summary(TypedDict):
    """What ``run`` saves in summary.json and the claims read (``claims.check_summary``)."""

    settings: Settings
    runs: list[Run]
    profile: NotRequired[str]
    model: NotRequired[dict]
    corpus: NotRequired[dict]
    paper: NotRequired[dict]


def run(
    profile: str, out: Path, position: str = "rope", seeds: tuple[int, ...] | None = None, settings: dict | None = None
) -> Summary:
    p = dict(PROFILES[profile], position=position, **(settings or {}))
    p["seeds"] = tuple(seeds or p["seeds"])
    corpus = nh.stdlib_corpus()
    pairs = nh.heldout_prompt_pairs(corpus, 1, p["n_pairs"], p["prompt_len"], p["length"])
    model_cfg = default_config(p["depth"], d_model=p["d_model"], position=position)
    runs = []
    for seed in p["seeds"]:
        start = time.perf_counter()
        train_cfg = TrainConfig(steps=p["steps"], batch_size=p["batch_size"], context=p["context"], seed=seed,
                                warmup_steps=p["steps"] // 10, eval_every=p["steps"] // 4,
                                checkpoint_every=max(10, p["steps"] // 40 * 10), log_every=10)  # a multiple of log_every
        run_dir = out / f"seed{seed}"
        result = train(model_cfg, train_cfg, corpus, run_dir,
                       callbacks=[((0, p["steps"]), offsets_callback(pairs, save_dir=run_dir))])
        measured = {e["step"]: e["offset_fits"] for e in result.history if "offset_fits" in e}
        bits = [e["eval_bits_per_byte"] for e in result.history if "eval_bits_per_byte" in e][-1]
        in_context, curves = {}, {}
        for step in (0, p["steps"]):
            with np.load(run_dir / f"offsets_step{step}.npz") as data:
                curves[step] = (data["t"], data["l2"], data["floor"])
            in_context[step] = [fit.to_dict() for fit in nh.fit_layers(*curves[step], t_max=p["context"] - p["prompt_len"])]
        # The bound on the trained model, inside its training context: conditions, explicit bound, shape test.
        inside = nh.PromptPairs(pairs.prompts_a, pairs.prompts_b, pairs.continuations[:, : p["context"] - p["prompt_len"]])
        bound = check_row(check_bound(result.model, inside, run_dir / "bound", seed=seed, progress=False,
                                      meta=dict(experiment="trained_vs_untrained", step=p["steps"])))
        runs.append(Run(seed=seed, untrained=measured[0], trained=measured[p["steps"]], bound=bound,
                         untrained_in_context=in_context[0], trained_in_context=in_context[p["steps"]],
                         trained_minus_untrained_in_context=_differences(curves[p["steps"]], curves[0], p),
                         bits_per_byte=bits, plateau=nh.held_out_plateau(result.history),
                         wall_s=time.perf_counter() - start))
    summary = Summary(profile=profile, settings=p, model=model_cfg.to_dict(), corpus=corpus.to_dict(), paper=PAPER, runs=runs)
    save_json(out / "summary.json", summary)
    draw(out)
    return summary


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
    p, seed = summary["settings"], summary["runs"][0]["seed"]
    before = np.load(out / f"seed{seed}" / "offsets_step0.npz")
    after = np.load(out / f"seed{seed}" / f"offsets_step{p['steps']}.npz")
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
    fig.suptitle(f"trained ({p['steps']} steps, context {p['context']}, {p['position']} positions) vs untrained; "
                 f"held-out text pairs, P = {p['prompt_len']}")
    fig.tight_layout()
    save_figure(out / "trained_vs_untrained.png", fig)


# ---------------------------------------------------------------- the claims this part measures


def _trained_enough(judge_run: Callable[[Run, Settings], Judgement]):
    """A judge of the small trained models (part trained_vs_untrained): ``judge_run(run, settings)``
    on every seed's run; agree or disagree only when the models count as trained (``criteria.short_of_trained``)
    and every seed gives that verdict, otherwise not measured at this scale with the numbers shown."""
    def judge(part: Summary):
        judged = [judge_run(run, part["settings"]) for run in part["runs"]]
        verdicts = {j.verdict for j in judged}
        evidence = dict(judged[0].evidence, plateau=[r.get("plateau") for r in part["runs"]],
                        seeds=[r["seed"] for r in part["runs"]], verdict_per_seed=[j.verdict for j in judged])
        measured = "; ".join(f"seed {r['seed']}: {j.measured}" for r, j in zip(part["runs"], judged))
        short = criteria.short_of_trained(part["runs"])
        if short:
            return Judgement(f"{measured}; not trained enough to judge: {short}", judged[0].interval, NOT_MEASURED,
                             evidence)
        verdict = verdicts.pop() if len(verdicts) == 1 else NOT_MEASURED
        return Judgement(measured + ("" if verdict != NOT_MEASURED or len(judged) == 1 else "; the seeds differ"),
                         judged[0].interval, verdict, evidence)
    return judge


def _trained(run: Run, p: Settings):
    fit, beyond = fit_from_dict(run["trained_in_context"][-1]), fit_from_dict(run["trained"][-1])
    if isinstance(fit, FitRefused):
        return criteria.unmeasured(fit.reason)
    beyond_window = list(beyond.t_range) if isinstance(beyond, PowerLawFit) else None
    text = (f"{fit.alpha:.2f} (last layer, t in {list(fit.t_range)}, inside the {p['context']}-token training context); "
            f"{criteria.alpha_text(beyond)} on t in {beyond_window}, extrapolating; {p['steps']} steps")
    return criteria.judged(text, criteria.alpha_interval(fit), criteria.overlaps(fit, *TRAINED_RANGE),
                           last_layer_interval=criteria.alpha_interval(fit),
                           window=list(fit.t_range), extrapolated=alphas([beyond])[0], steps=p["steps"])


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
    parser.add_argument("--position", choices=("rope", "none"), default="rope",
                        help="position encoding; both extrapolate beyond the training context (default rope)")
    parser.add_argument("--seeds", type=int, nargs="+", default=None,
                        help="training seeds (default: the profile's); finished seeds are reused, not retrained")
    args = parse_experiment_args(parser)
    summary = run(args.profile, args.out, args.position, args.seeds)
    for r in summary["runs"]:
        print(f"seed {r['seed']}: held-out bits per byte {r['bits_per_byte']:.3f}, {r['wall_s'] / 60:.1f} min")
        for key in ("untrained", "trained", "untrained_in_context", "trained_in_context"):
            print(f"  {key + ' alpha per layer:':<38}" + "; ".join(nh.fit_from_dict(f).brief() for f in r[key]))
    print(part_claims_text(CLAIMS, summary))


if __name__ == "__main__":
    main()
