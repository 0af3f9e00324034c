"""The claims of the two papers and the checks of the implementation, each with its criterion and judge.

A *claim* is one statement of the papers (or a finding of this project's own, marked so) about
models, which the data could contradict: the value the paper gives, the parts of ``nohair
reproduce`` that measure it, and its *criterion*, stated in words before anything is measured
(the quantity, the window, the statistic, the threshold, and what would make it "disagree"). A
*check* is an identity, a derivation or an implementation test (the relay model attains the
bound, a window's reach, conditions that are finite on any finite run, consensus at a gain where
the proof guarantees it): it passes or fails, and it is never counted as agreement with a paper.
Every statement of the two abstracts keeps a claim row; a statement that is proved rather than
measured says so ("not measured at this scale") and names the check that verifies it.

Judges are pure functions of the parts' saved summaries that apply exactly the criterion and
return a ``Judgement``: what was measured (text), its interval, the verdict (``agree``,
``disagree`` or ``not measured at this scale``) and the evidence, the numbers the verdict was
computed from. ``tests/test_claims.py`` gives every judge hand-built summaries that reach each of
its verdicts.

Intervals are 95 % t-intervals over prompt pairs with a bootstrap standard error
(``fit.t_interval``; over seeds, then pairs, where the models are fresh initialisations), whose
coverage ``tests/test_coverage.py`` checks by simulation. A "no effect" claim is judged by
equivalence (``EQUIVALENCE_MARGIN``): agree only when the whole interval lies inside the margin,
so a wider, noisier interval cannot agree. "Approximately a power law" is judged at a stated
tolerance (``POWER_LAW_TOLERANCE``), not by which law fits best. Rows that test "every layer"
agree only when every layer's own 95 % interval does (an intersection-union test: no correction
is needed for that direction); the layers a row is judged on are named in its criterion.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, NamedTuple

import numpy as np

from nohair_jax.bound.records import NotApplicable, ShapeCheck, constants_from_saved, explicit_from_saved, shape_from_dict
from nohair_jax.fit import (
    AlphaDifference, FitRefused, PowerLawFit, PowerLawTolerance, alphas, bonferroni, fit_from_dict, fit_power_law,
)

NOT_MEASURED = "not measured at this scale"
VERDICTS = ("agree", "disagree", NOT_MEASURED)
CLAIM, CHECK = "claim", "check"  # a statement about models the data could contradict; an identity or implementation test
KINDS = (CLAIM, CHECK)
EQUIVALENCE_MARGIN = 0.1  # "no effect" on alpha: the whole interval of the difference inside +-0.1
POWER_LAW_TOLERANCE = 0.10  # "approximately a power law": largest |log residual| at most 0.10 (about 10 %)
POWER_LAW_TOLERANCES = (0.05, 0.10, 0.20)  # the verdict at each, so a reader sees how it depends on the tolerance
MIN_DECADES = 1.5  # a power law is only judged over a window of at least this many decades of t


class Judgement(NamedTuple):
    """measured: what was measured, in words; interval: [lo, hi] of the quantity judged, or None;
    verdict: one of ``VERDICTS``; evidence: the numbers the verdict was computed from."""

    measured: str
    interval: list | None
    verdict: str
    evidence: dict


@dataclasses.dataclass(frozen=True)
class Claim:
    """One claim, the criterion it is judged by, and its judge.

    ``judge(summaries) -> Judgement`` gets ``{part name: summary dict}`` of the parts that ran; it is
    only called when every part in ``parts`` is present. ``kind``: ``CLAIM`` or ``CHECK`` (see the
    module docstring); a check's "agree" reads "pass".
    """

    id: str
    claim: str
    paper_value: str
    parts: tuple[str, ...]
    criterion: str
    judge: Callable[[dict], Judgement]
    kind: str = CLAIM


def _judged(measured: str, interval, ok: bool, **evidence) -> Judgement:
    return Judgement(measured, interval, "agree" if ok else "disagree", evidence)


def _unmeasured(measured: str, **evidence) -> Judgement:
    return Judgement(measured, None, NOT_MEASURED, evidence)


def _equivalence(measured: str, interval, margin: float = EQUIVALENCE_MARGIN, **evidence) -> Judgement:
    """A "no effect" verdict by equivalence: agree when ``interval`` lies inside ``[-margin, margin]``,
    disagree when it lies wholly outside, otherwise not measured (the data cannot tell)."""
    lo, hi = interval
    evidence = dict(evidence, margin=margin)
    if -margin < lo and hi < margin:
        return Judgement(measured + f"; inside the equivalence margin +-{margin:g}", interval, "agree", evidence)
    if hi < -margin or lo > margin:
        return Judgement(measured + f"; outside the equivalence margin +-{margin:g}", interval, "disagree", evidence)
    return Judgement(measured + f"; the interval crosses the equivalence margin +-{margin:g}: too wide to tell "
                     "equal from different", interval, NOT_MEASURED, evidence)


def _proved(check: str, why: str):
    """The judge of a statement that is proved rather than measured: no data on models can
    contradict it, so its row says so and names the check that verifies it."""
    return lambda s: _unmeasured(f"{why}; verified by the check {check}")


def _every_above_zero(diffs: list[AlphaDifference]) -> tuple[str, list[int], list[int]]:
    """A row that says "above 0 in every layer": agree when every interval lies above 0 (each at 95 %:
    all of them must hold, so no correction is needed), disagree when some interval widened for the
    number of layers (``fit.bonferroni``) lies below 0, otherwise not measured. Returns (verdict,
    the layers above 0, the layers below 0 after the correction)."""
    above = [k for k, d in enumerate(diffs, start=1) if d.ci[0] > 0]
    below = [k for k, d in enumerate(diffs, start=1)
             if (wide := bonferroni(d.ci, d.dof, len(diffs), d.confidence)) is not None and wide[1] < 0]
    verdict = "agree" if len(above) == len(diffs) else "disagree" if below else NOT_MEASURED
    return verdict, above, below


def _fits(saved: list[dict]) -> list[PowerLawFit | FitRefused]:
    """The fits of a summary's list of saved fits (``fit.fit_from_dict``)."""
    return [fit_from_dict(f) for f in saved]


def _fmt(fit: PowerLawFit | FitRefused) -> str:
    return f"{fit.alpha:.2f}" if isinstance(fit, PowerLawFit) else "no fit"


def _interval(fit: PowerLawFit | FitRefused) -> list | None:
    """alpha's interval rounded for the table; None where refused or without one."""
    ci = fit.ci if isinstance(fit, PowerLawFit) else None
    return None if ci is None else [round(ci[0], 3), round(ci[1], 3)]


def _differences(saved: list[dict]) -> list[AlphaDifference | FitRefused]:
    """The differences of a summary's list of saved ones (``fit.fit_from_dict``)."""
    return [fit_from_dict(d) for d in saved]


def _with_interval(diffs) -> bool:
    """Every difference fitted, each with an interval."""
    return all(isinstance(d, AlphaDifference) and d.ci is not None for d in diffs)


def _ci(diff: AlphaDifference | FitRefused) -> list | None:
    return list(diff.ci) if isinstance(diff, AlphaDifference) and diff.ci is not None else None


def _refusals(diffs) -> list[str | None]:
    return [d.reason if isinstance(d, FitRefused) else None for d in diffs]


def _overlaps(fit: PowerLawFit, lo: float, hi: float) -> bool:
    ci = _interval(fit) or [fit.alpha, fit.alpha]
    return ci[1] >= lo and ci[0] <= hi


# ---------------------------------------------------------------- the real language model (part real_model)


def _llm_fits(s, key: str) -> list[PowerLawFit | FitRefused]:
    return _fits(s["real_model"][key]["fits"])


def _llm_alpha(key: str, lo: float, hi: float):
    """The last layer's alpha of the trained model (``key="trained"``) or of its config at init."""
    def judge(s):
        rm, fits = s["real_model"], _llm_fits(s, key)
        fit = fits[-1]
        if isinstance(fit, FitRefused):
            return _unmeasured(f"the last layer could not be fitted: {fit.reason}")
        fitted = [a for a in alphas(fits) if a is not None]
        init = rm["init"]
        who = ("SmolLM2-135M-Instruct (Q4_1)" if key == "trained"
               else f"its config at init (std {init.get('init_std', 0.02):.3g}), seeds {init['seeds']}, "
                    f"{init['pairs_per_seed']} pairs each")
        relay = init.get("relay_alpha") if key == "init" else None
        text = (f"{fit.alpha:.2f} (last of {len(fits)} layers, t in {list(fit.t_range)}, {who}); "
                f"layers: median {np.median(fitted):.2f}, range {min(fitted):.2f} to {max(fitted):.2f}"
                + (f"; the relay model at the same depth and windows: {relay[-1]:.2f} at the last layer, "
                   f"{min(relay):.2f} to {max(relay):.2f} over layers" if relay else ""))
        return _judged(text, _interval(fit), _overlaps(fit, lo, hi), alpha_per_layer=alphas(fits),
                       last_layer_interval=_interval(fit), window=list(fit.t_range), paper_range=[lo, hi],
                       relay_alpha_per_layer=relay)
    return judge


def _llm_faster(s):
    diffs = _differences(s["real_model"]["trained_minus_init"])
    if not diffs or not _with_interval(diffs):
        return _unmeasured("the difference could not be fitted with an interval in every layer", errors=_refusals(diffs))
    verdict, faster, slower = _every_above_zero(diffs)
    last = diffs[-1]
    text = (f"trained minus init alpha: interval above 0 in {len(faster)}/{len(diffs)} layers, below 0 in "
            f"{len(slower)} after a Bonferroni correction over {len(diffs)} layers; last layer {last.brief()} "
            f"on t in {list(last.t_range)}")
    return Judgement(text, [round(v, 3) for v in last.ci], verdict, dict(
        layers_faster=faster, layers_slower=slower, difference=[d.difference for d in diffs],
        intervals=[_ci(d) for d in diffs]))


def _llm_conditions(s):
    c = s["real_model"]["trained"]["conditions"]
    sigma = min(min(c["sigma_min_attn"]), min(c["sigma_min_mlp"])) / c["sqrt_eps"]
    text = (f"largest logit B per layer {min(c['logit_bound']):.3g} to {max(c['logit_bound']):.3g}; smallest "
            f"sigma_min = {sigma:.3g} x sqrt(eps) over the {2 * len(c['logit_bound'])} block norms")
    return _judged(text + (f"; fails: {c['failures'][0]}" if c["failures"] else ""), None, not c["failures"],
                   logit_bound=c["logit_bound"], sigma_min_attn=c["sigma_min_attn"], sigma_min_mlp=c["sigma_min_mlp"],
                   sqrt_eps=c["sqrt_eps"], failures=c["failures"])


SLOPE_MARGIN = 0.1  # "decays at least like the relay shape": offset / shape grows by at most t^0.1 on [T/16, T]


def _shape_test(saved: list[dict]) -> tuple[str, list | None, str, dict] | None:
    """The relay-shape test over layers (saved ``bound.shape_check`` layers): (text, the worst layer's
    interval, verdict, evidence); None if some layer could not be fitted or has no interval. Agree
    when every layer's slope interval ends at or below ``SLOPE_MARGIN``; disagree when some layer's
    interval, widened for the number of layers (``fit.bonferroni``), starts above it."""
    entries = [shape_from_dict(e) for e in saved]
    if not entries or not all(isinstance(e, ShapeCheck) and e.interval is not None for e in entries):
        return None
    worst = max(entries, key=lambda e: e.slope)
    within = [e.layer for e in entries if e.interval[1] <= SLOPE_MARGIN]
    beyond = [e.layer for e in entries if (wide := bonferroni(e.interval, e.dof, len(entries))) is not None
              and wide[0] > SLOPE_MARGIN]
    verdict = "agree" if len(within) == len(entries) else "disagree" if beyond else NOT_MEASURED
    text = (f"slope of offset / relay shape on [T/16, T]: at most {worst.slope:.3f} (layer {worst.layer}); interval "
            f"at or below {SLOPE_MARGIN} in {len(within)}/{len(entries)} layers, above it after a Bonferroni correction "
            f"in {len(beyond)}")
    return text, [round(v, 3) for v in worst.interval], verdict, dict(
        slopes=[e.slope for e in entries], intervals=[e.to_dict()["interval"] for e in entries], layers_beyond=beyond)


def _llm_relay_logs(s):
    bound = s["real_model"]["trained"]["bound"]
    shape = _shape_test(bound["shape"])
    if shape is None:
        return _unmeasured("the shape test could not be fitted in every layer")
    text, interval, verdict, evidence = shape
    constants = constants_from_saved(bound["constants"])
    if isinstance(constants, NotApplicable):
        explicit = f"no explicit bound ({constants.reason})"
    else:  # constants beyond float64 are saved as null
        finite = [c for c in constants["C"] if c is not None]
        overflow = len(constants["C"]) - len(finite)
        explicit = (f"explicit constants C_l from {min(finite):.3g} to {max(finite):.3g}"
                    + (f", beyond float64 in {overflow} layers" if overflow else ""))
    return Judgement(f"{text}; {explicit}", interval, verdict, dict(evidence, constants=bound["constants"]))


def _llm_threshold(s):
    d = s["real_model"]["trained"]["dynamics"]
    ratio, diam = np.asarray(d["mlp_over_attn_bound"]), np.asarray(d["sphere_diameter"])
    change = np.diff(diam)  # [L]: across layer l
    above = ratio > 1
    evidence = dict(gain_analogue=ratio.tolist(), sphere_diameter=diam.tolist())
    text = (f"gain analogue per layer {ratio.min():.2f} to {ratio.max():.2f} ({above.sum()}/{ratio.size} layers above 1); "
            f"sphere diameter {diam[0]:.2f} at the embedding, {diam[-1]:.2f} after the last layer")
    if not above.any() or above.all():
        return _unmeasured(text + ": the threshold is not crossed inside this model, so it cannot be located", **evidence)
    contracts = change[above].mean() < 0 and change[above].mean() < change[~above].mean()
    text += (f"; mean diameter change across layers above 1: {change[above].mean():+.3f}, below 1: "
             f"{change[~above].mean():+.3f}")
    return _judged(text, None, bool(contracts), **evidence)


def _llm_direct(s):
    rm = s["real_model"]
    fit = _fits(rm["trained"]["split"]["direct"])[-1]
    if not isinstance(fit, PowerLawFit) or fit.ci is None:
        return _unmeasured("the last layer's direct read could not be fitted with an interval")
    reference = _dilution_alpha(rm["settings"]["prompt_len"], fit.t_range)
    fitted = [a for a in alphas(_fits(rm["trained"]["split"]["direct"])) if a is not None]
    text = (f"SmolLM2-135M-Instruct, last layer: direct-read alpha {fit.brief()} on t in {list(fit.t_range)} against "
            f"{reference:.2f} for P / (P + t) on the same window (all layers {min(fitted):.2f} to {max(fitted):.2f})")
    difference = [round(fit.ci[0] - reference, 3), round(fit.ci[1] - reference, 3)]
    return _equivalence(text + f"; difference {fit.alpha - reference:+.2f} [{difference[0]:+.2f}, {difference[1]:+.2f}]",
                        difference, direct_alpha=alphas(_fits(rm["trained"]["split"]["direct"])), dilution_alpha=reference)


def _llm_bias_stops(s):
    saved = s["real_model"].get("bias_at_inference")
    rows = [r for r in (saved or {}).get("rows", []) if r["gamma"] == 1.0]
    if not rows:
        return _unmeasured("the bias at gamma = 1 was not measured")
    fits = {r["gamma"]: fit_from_dict(r["fit"]) for r in saved["rows"]}
    diffs = {r["gamma"]: fit_from_dict(r["minus_none"]) for r in saved["rows"]}
    fit = fits[1.0]
    if not isinstance(fit, PowerLawFit) or fit.ci is None:
        return _unmeasured("the last layer could not be fitted with an interval at gamma = 1")
    text = (f"SmolLM2-135M-Instruct with the bias at inference, {saved['pairs']} pairs, last layer: alpha "
            + "; ".join(f"gamma {g:g}: {f.brief()} (minus without the bias {diffs[g].brief()})" for g, f in fits.items()))
    return _equivalence(text, _interval(fit), alpha=alphas(list(fits.values())), gammas=list(fits),
                        minus_none=[d.to_dict() for d in diffs.values()])


# ---------------------------------------------------------------- the project's small models


def _deepest_last_layer(s: dict) -> PowerLawFit | FitRefused:
    return fit_from_dict(s["untrained_alpha"]["rows"][-1]["fits"][-1])


def _power_law(s):
    rows = s["untrained_alpha"]["rows"]
    records = [(row["depth"], k, fit_from_dict(r)) for row in rows for k, r in enumerate(row.get("power_law", []), start=1)]
    depth, layer, judged = records[-1] if records else (None, None, None)
    if not isinstance(judged, PowerLawTolerance):
        return _unmeasured("the deepest model's last layer could not be held against a power law"
                           + (f": {judged.reason}" if isinstance(judged, FitRefused) else ""))
    measured = [(d, k, r) for d, k, r in records if isinstance(r, PowerLawTolerance)]
    evidence = dict(depth=depth, layer=layer, deviation=judged.deviation, deviation_interval=judged.ci,
                    holdout=judged.holdout, holdout_interval=judged.holdout_ci, window=list(judged.t_range),
                    decades=judged.decades, cv_error=judged.cv_error,
                    at_tolerance={f"{tol:g}": _within_text(judged.within(tol)) for tol in POWER_LAW_TOLERANCES},
                    all_layers=[dict(depth=d, layer=k, deviation=r.deviation, holdout=r.holdout) for d, k, r in measured])
    best_cv = min(judged.cv_error, key=judged.cv_error.get) if judged.cv_error else None
    text = (f"depth {depth}, last layer, t in {list(judged.t_range)} ({judged.decades:.2f} decades): largest |log residual| "
            f"of the best power law {_brief(judged.deviation, judged.ci)}, second half predicted from the first "
            f"{_brief(judged.holdout, judged.holdout_ci)}; at tolerance "
            + ", ".join(f"{k}: {v}" for k, v in evidence["at_tolerance"].items())
            + (f"; lowest cross-validated error: {best_cv} ({judged.cv_error[best_cv]:.3f}, power "
               f"{judged.cv_error['power']:.3f})" if best_cv else ""))
    if judged.decades < MIN_DECADES:
        return _unmeasured(text + f"; the window spans fewer than {MIN_DECADES} decades", **evidence)
    within = judged.within(POWER_LAW_TOLERANCE)
    if within is None:
        return Judgement(text, judged.ci, NOT_MEASURED, evidence)
    return _judged(text, judged.ci, within, **evidence)


def _brief(value: float, ci) -> str:
    return f"{value:.3f}" + ("" if ci is None else f" [{ci[0]:.3f}, {ci[1]:.3f}]")


def _within_text(within: bool | None) -> str:
    return {True: "agree", False: "disagree", None: NOT_MEASURED}[within]


def _untrained(s):
    fit = _deepest_last_layer(s)
    if isinstance(fit, FitRefused):
        return _unmeasured(fit.reason)
    depth = s["untrained_alpha"]["rows"][-1]["depth"]
    fitted = [a for row in s["untrained_alpha"]["rows"] for a in alphas(_fits(row["fits"])) if a is not None]
    relay = s["untrained_alpha"]["rows"][-1].get("relay_alpha")
    text = (f"{fit.alpha:.2f} (last layer, depth {depth}); all layers {min(fitted):.2f} to {max(fitted):.2f}"
            + (f"; the relay model at the same depth and window: {relay[-1]:.2f}" if relay else ""))
    return _judged(text, _interval(fit), _overlaps(fit, 0.2, 0.5), depth=depth, last_layer_interval=_interval(fit),
                   window=list(fit.t_range), relay_alpha_per_layer=relay)


PLATEAU_SHARE = 0.02  # "trained": the last fifth of training lowered the held-out loss by less than 2 % of its drop
MIN_SEEDS = 3  # a small trained model supports a claim only when this many seeds were trained and agree


def _short_of_trained(runs: list[dict]) -> str | None:
    """Why small trained models cannot support a claim (too few seeds, a held-out loss still falling:
    ``train.held_out_plateau``), or None when they can."""
    reasons = [f"{len(runs)} seed(s) trained, {MIN_SEEDS} needed"] if len(runs) < MIN_SEEDS else []
    shares = [r.get("plateau", {}).get("share") for r in runs]
    if None in shares:
        reasons.append("no held-out loss history was saved")
    elif any(not share < PLATEAU_SHARE for share in shares):
        reasons.append("the held-out loss was still falling: the last fifth of training lowered it by "
                       + ", ".join(f"{share:.1%}" for share in shares) + f" of its whole drop (levelled off: below "
                       f"{PLATEAU_SHARE:.0%})")
    return "; ".join(reasons) or None


def _trained_enough(judge_run: Callable[[dict, dict], Judgement]):
    """A judge of the small trained models (part trained_vs_untrained): ``judge_run(run, settings)``
    on every seed's run; agree or disagree only when the models count as trained (``_short_of_trained``)
    and every seed gives that verdict, otherwise not measured at this scale with the numbers shown."""
    def judge(s):
        part = s["trained_vs_untrained"]
        judged = [judge_run(run, part["settings"]) for run in part["runs"]]
        verdicts = {j.verdict for j in judged}
        evidence = dict(judged[0].evidence, plateau=[r.get("plateau") for r in part["runs"]],
                        seeds=[r["seed"] for r in part["runs"]], verdict_per_seed=[j.verdict for j in judged])
        measured = "; ".join(f"seed {r['seed']}: {j.measured}" for r, j in zip(part["runs"], judged))
        short = _short_of_trained(part["runs"])
        if short:
            return Judgement(f"{measured}; not trained enough to judge: {short}", judged[0].interval, NOT_MEASURED,
                             evidence)
        verdict = verdicts.pop() if len(verdicts) == 1 else NOT_MEASURED
        return Judgement(measured + ("" if verdict != NOT_MEASURED or len(judged) == 1 else "; the seeds differ"),
                         judged[0].interval, verdict, evidence)
    return judge


def _trained(run, p):
    fit, beyond = fit_from_dict(run["trained_in_context"][-1]), fit_from_dict(run["trained"][-1])
    if isinstance(fit, FitRefused):
        return _unmeasured(fit.reason)
    beyond_window = list(beyond.t_range) if isinstance(beyond, PowerLawFit) else None
    text = (f"{fit.alpha:.2f} (last layer, t in {list(fit.t_range)}, inside the {p['context']}-token training context); "
            f"{_fmt(beyond)} on t in {beyond_window}, extrapolating; {p['steps']} steps")
    return _judged(text, _interval(fit), _overlaps(fit, 0.55, 0.7), last_layer_interval=_interval(fit),
                   window=list(fit.t_range), extrapolated=alphas([beyond])[0], steps=p["steps"])


def _trained_faster(run, p):
    diffs = _differences(run["trained_minus_untrained_in_context"])
    if not diffs or not _with_interval(diffs):
        return _unmeasured("the difference could not be fitted with an interval in every layer", errors=_refusals(diffs))
    text = "; ".join(f"layer {k}: {d.brief()}" for k, d in enumerate(diffs, start=1))
    verdict, _, slower = _every_above_zero(diffs)
    return Judgement(f"trained minus untrained alpha inside the training context (t in {list(diffs[0].t_range)}): "
                     f"{text}; below 0 after a Bonferroni correction over {len(diffs)} layers: {slower or 'none'}", None,
                     verdict, dict(difference=[d.difference for d in diffs], intervals=[_ci(d) for d in diffs]))


def _conditions(s):
    rows = s["bound_check"]["rows"]
    failures = [f for row in rows for f in row["failures"]]
    logit = max(max(row["logit_bound"]) for row in rows)
    sigma = min(row["sigma_min_over_floor"] for row in rows)
    text = f"largest logit B = {logit:.3g}; smallest sigma_min = {sigma:.3g} x sqrt(eps); depths {[r['depth'] for r in rows]}"
    return _judged(text + (f"; fails: {failures[0]}" if failures else ""), None, not failures, largest_logit=logit,
                   sigma_min_over_sqrt_eps=sigma, failures=failures)


def _bound_holds(s):
    checks = [explicit_from_saved(r["explicit"]) for r in s["bound_check"]["rows"]]
    entries = [e for c in checks if not isinstance(c, NotApplicable) for e in c]
    if not entries:
        return _unmeasured("the bound does not apply to the measured models")
    margins = [e.margin for e in entries]
    holds = all(e.holds for e in entries)
    text = (f"explicit bound {'above every' if holds else 'below some'} measured offset; "
            f"smallest margin bound/measured = {min(margins):.3g}")
    return _judged(text, None, holds, margins=margins)


def _trained_bound(s):
    rows = [r["bound"] for r in s["trained_vs_untrained"]["runs"]]
    failures = [f for r in rows for f in r["failures"]]
    applies = [c for c in (explicit_from_saved(r["explicit"]) for r in rows) if not isinstance(c, NotApplicable)]
    shape = _shape_test([e for r in rows for e in r["shape"]])
    evidence = dict(logit_bound=[r["logit_bound"] for r in rows],
                    sigma_min_over_sqrt_eps=[r["sigma_min_over_floor"] for r in rows],
                    failures=failures, margins=[e.margin for c in applies for e in c],
                    **(shape[3] if shape else {}))
    short = _short_of_trained(s["trained_vs_untrained"]["runs"])
    if short:
        return _unmeasured(f"not trained enough to judge: {short}", **evidence)
    if failures:
        return _judged(f"a condition fails: {failures[0]}", None, False, **evidence)
    if len(applies) < len(rows) or shape is None:
        return _unmeasured("the explicit bound or the shape test could not be computed on every trained model", **evidence)
    holds = all(e.holds for c in applies for e in c)
    text = (f"largest logit B = {max(max(b) for b in evidence['logit_bound']):.3g}, smallest sigma_min = "
            f"{min(evidence['sigma_min_over_sqrt_eps']):.3g} x sqrt(eps); explicit bound "
            f"{'above every' if holds else 'below some'} offset (smallest margin {min(evidence['margins']):.3g}); "
            f"{shape[0]}")
    verdict = shape[2] if holds else "disagree"
    return Judgement(text, shape[1], verdict, evidence)


def _relay_logs(s):
    shape = _shape_test([e for r in s["bound_check"]["rows"] for e in r["shape"]])
    if shape is None:
        return _unmeasured("shape check could not be fitted")
    text, interval, verdict, evidence = shape
    return Judgement(text, interval, verdict, evidence)


def _dilution_alpha(prompt_len: int, t_range: list) -> float:
    """alpha of the pure dilution curve P / (P + t) fitted on the same window."""
    t = np.arange(t_range[0], t_range[1] + 1, dtype=np.float64)
    return fit_power_law(t, prompt_len / (prompt_len + t), t_min=t_range[0], n_boot=0).alpha


def _direct(s):
    split = s["direct_vs_relay"]
    fits = [f for f in _fits(split["fits"]["direct"]) if isinstance(f, PowerLawFit)]
    if not fits:
        return _unmeasured("no direct part could be fitted")
    reference = _dilution_alpha(split["settings"]["prompt_len"], fits[0].t_range)
    direct = alphas(fits)
    text = (f"direct-read alpha per layer {', '.join(f'{a:.2f}' for a in direct)}; dilution P/(P+t) on the same window "
            f"{reference:.2f}")
    return _judged(text, [round(min(direct), 3), round(max(direct), 3)], all(abs(a - reference) < 0.1 for a in direct),
                   direct_alpha=direct, dilution_alpha=reference)


def _bound_tight(s):
    rows = s["relay_model"]["rows"]
    deep = [r for r in rows if r["depth"] >= 2]
    approaching = all(np.all(np.diff(r["ratio_to_shape"]) > 0) and r["ratio_to_shape"][-1] <= r["ratio_limit"] * (1 + 1e-9)
                      and r["ratio_to_shape"][-1] > 0.5 * r["ratio_limit"] for r in deep)
    t_max = rows[0]["ratio_t"][-1]
    text = "; ".join(f"L={r['depth']}: {r['ratio_to_shape'][-1]:.3g} -> {r['ratio_limit']:.3g}" for r in deep)
    return _judged(f"delta_L / (P (log t)^(L-1) / t) at t = {t_max:.0e}: {text}", None, approaching,
                   ratio_at_t_max={r["depth"]: r["ratio_to_shape"][-1] for r in deep},
                   limit={r["depth"]: r["ratio_limit"] for r in deep})


def _exponent_rise(s):
    return _rise([row for row in s["untrained_vs_relay"]["layers"] if row["layer"] >= 2])


def _llm_exponent_rise(s):
    layers = s["real_model"]["init"].get("local_exponent")
    if layers is None:
        return _unmeasured("the local exponent at initialisation was not saved")
    judged = _rise(layers)
    return judged._replace(measured=f"SmolLM2's config at its stated init, layers {[r['layer'] for r in layers]}: "
                                    + judged.measured)


RISE_MARGIN = 0.05  # a local exponent "rises" across the window by more than this, first to last quarter


def _rise(layers: list[dict]) -> Judgement:
    """The relay model reproduces the network's rise of the local exponent (``fit.local_exponent_rise``,
    first to last quarter of the log bins), layer by layer: agree when in every layer the network's
    rise interval lies above 0 and the relay model rises by more than ``RISE_MARGIN``; disagree when in
    some layer the two part ways beyond doubt (the network's interval, widened for the number of
    layers, lies above 0 while the relay model does not rise, or below 0 while it does); otherwise
    not measured."""
    if not layers:
        return _unmeasured("needs depth >= 2")
    if any("rise" not in row for row in layers):
        return _unmeasured("the rise of the local exponent was not saved with an interval")
    rises = [fit_from_dict(row["rise"]) for row in layers]
    relay = [row["relay_rise"] for row in layers]
    wide = [bonferroni(r.ci, r.dof, len(rises), r.confidence) for r in rises]
    both = [r.ci is not None and r.ci[0] > 0 and q > RISE_MARGIN for r, q in zip(rises, relay)]
    apart = [w is not None and ((w[0] > 0 and q <= RISE_MARGIN) or (w[1] < 0 and q > RISE_MARGIN))
             for w, q in zip(wide, relay)]
    verdict = "agree" if all(both) else "disagree" if any(apart) else NOT_MEASURED
    text = "local exponent, first to last quarter of t: " + "; ".join(
        f"layer {row['layer']}: {r.first:.2f} -> {r.last:.2f}, rise {r.brief()} (relay {q:+.2f})"
        for row, r, q in zip(layers, rises, relay))
    return Judgement(text, None, verdict, dict(network_rise=[r.to_dict() for r in rises], relay_rise=relay,
                                               layers=[row["layer"] for row in layers]))


EARLY_FRACTION = 0.05  # "early in training": the first 5 % of the steps
NEAR_ZERO = 0.1  # an alpha whose interval ends below this has stopped decaying


def _bias_evidence(ic: dict) -> dict:
    return dict(window=[32, ic["t_max"]], steps=[r["step"] for r in ic["rows"]],
                **{name: alphas(_fits([r[name] for r in ic["rows"]])) for name in ("bias", "no_bias")},
                **{f"{name}_interval": [_interval(f) for f in _fits([r[name] for r in ic["rows"]])]
                   for name in ("bias", "no_bias")},
                difference_interval=[_ci(fit_from_dict(r["difference"])) for r in ic["rows"]])


def _bias_last_step(run: str, accept: Callable[[PowerLawFit], bool]):
    """Judge one run's (``bias`` or ``no_bias``) last-layer fit at the last measured step with ``accept(fit)``."""
    def judge(s):
        ic = s["logit_bias"]["in_context"]
        last = ic["rows"][-1]
        fit = fit_from_dict(last[run])
        if isinstance(fit, FitRefused):
            return _unmeasured(fit.reason, **_bias_evidence(ic))
        text = f"{fit.alpha:.2f} (last layer, step {last['step']}, t in {list(fit.t_range)}, inside the training context)"
        part = s["logit_bias"]
        seeds = part.get("seeds", [part.get("seed")])  # one seed per run today
        short = _short_of_trained([dict(part["runs"][run], seed=seed) for seed in seeds])
        if short:
            return _unmeasured(f"{text}; not trained enough to judge: {short}", **_bias_evidence(ic))
        return _judged(text, _interval(fit), accept(fit), **_bias_evidence(ic))
    return judge


def _near_zero(fit: PowerLawFit | FitRefused) -> bool:
    ci = _interval(fit)
    return ci is not None and (ci[0] <= 0 <= ci[1] or ci[1] < NEAR_ZERO)


def _stopped(row: dict) -> bool:
    """The biased run's alpha is near 0 at this step and below the unbiased run's."""
    diff = _ci(fit_from_dict(row["difference"]))
    return _near_zero(fit_from_dict(row["bias"])) and diff is not None and diff[1] < 0


def _bias_stops(s):
    ic = s["logit_bias"]["in_context"]
    rows, evidence = ic["rows"], _bias_evidence(ic)
    start = _ci(fit_from_dict(rows[0]["difference"]))
    if rows[0]["step"] != 0 or start is None:
        return _unmeasured("alpha at initialisation was not measured in both runs", **evidence)
    if not start[0] <= 0 <= start[1]:
        return _unmeasured(f"the bias already changes alpha at initialisation (bias minus no bias "
                           f"[{start[0]:+.2f}, {start[1]:+.2f}]), so a stop caused by training cannot be seen", **evidence)
    early = [r for r in rows if 0 < r["step"] <= EARLY_FRACTION * ic["steps_total"]]
    if not early:
        return _unmeasured(f"no step measured in the first {EARLY_FRACTION:.0%} of the {ic['steps_total']} steps "
                           f"(measured: {[r['step'] for r in rows]})", **evidence)
    stops = [r["step"] for r in early if _stopped(r)]
    alpha_text = {name: ", ".join(_fmt(f) for f in _fits([r[name] for r in early])) for name in ("bias", "no_bias")}
    text = (f"early steps {[r['step'] for r in early]}: bias alpha {alpha_text['bias']}, "
            f"no bias {alpha_text['no_bias']}; stopped at {stops or 'no early step'}")
    return _judged(text, None, bool(stops), **evidence)


def _dilution_fits(s, variant: str) -> list[tuple[int, int, PowerLawFit | FitRefused]]:
    """(depth, layer, fit) of one variant of the uniform-attention networks, every depth and layer."""
    return [(r["depth"], k, f) for r in s["dilution"]["rows"] for k, f in enumerate(_fits(r[variant]), start=1)]


def _dilution_evidence(s) -> dict:
    rows = s["dilution"]["rows"]
    return dict(depths=[r["depth"] for r in rows], seeds=s["dilution"]["settings"]["seeds"],
                **{name: [alphas(_fits(r[name])) for r in rows] for name in ("uniform", "uniform_bias")},
                **{f"{name}_interval": [[_interval(f) for f in _fits(r[name])] for r in rows]
                   for name in ("uniform", "uniform_bias")},
                difference_interval=[[_ci(d) for d in _differences(r["difference"])] for r in rows],
                relay_alpha=[r["relay"] for r in rows])


def _sufficient(s):
    fits, evidence = _dilution_fits(s, "uniform"), _dilution_evidence(s)
    if any(_interval(f) is None for _, _, f in fits):
        return _unmeasured("a layer of the uniform-attention networks could not be fitted with an interval", **evidence)
    lowest = min(fits, key=lambda x: _interval(x[2])[0])
    relay = [a for r in s["dilution"]["rows"] for a in r["relay"]]
    text = (f"uniform attention, no bias: alpha {min(f.alpha for _, _, f in fits):.2f} to "
            f"{max(f.alpha for _, _, f in fits):.2f} over {len(fits)} layers (depths {evidence['depths']}, "
            f"seeds {evidence['seeds']}); lowest interval {_interval(lowest[2])} (depth {lowest[0]}, layer {lowest[1]}); "
            f"relay model on the same windows {min(relay):.2f} to {max(relay):.2f}")
    return _judged(text, None, _interval(lowest[2])[0] > 0, **evidence)


def _necessary(s):
    fits, evidence = _dilution_fits(s, "uniform_bias"), _dilution_evidence(s)
    diffs = [(r["depth"], k, d) for r in s["dilution"]["rows"] for k, d in enumerate(_differences(r["difference"]), start=1)]
    if any(_interval(f) is None for _, _, f in fits) or not _with_interval(d for _, _, d in diffs):
        return _unmeasured("a layer of the biased networks, or its difference, could not be fitted with an interval",
                           **evidence)
    moving = [f"depth {depth} layer {k} {_interval(f)}" for depth, k, f in fits if not _near_zero(f)]
    same = [f"depth {depth} layer {k} [{d.ci[0]:+.2f}, {d.ci[1]:+.2f}]" for depth, k, d in diffs if d.ci[0] <= 0]
    text = (f"uniform attention with the bias: alpha {min(f.alpha for _, _, f in fits):+.2f} to "
            f"{max(f.alpha for _, _, f in fits):+.2f} over {len(fits)} layers; not near 0: {moving or 'none'}; "
            f"difference without minus with the bias not above 0: {same or 'none'}")
    return _judged(text, None, not moving and not same, **evidence)


def _depth(s):
    sweep = s["depth_length_sweep"]
    saved = sweep.get("depth_differences", [])
    diffs = _differences(saved)  # each record also names its prompt length and its two depths
    if not diffs or not _with_interval(diffs):
        return _unmeasured("needs two depths with a fitted difference at every prompt length", errors=_refusals(diffs))
    text = "; ".join(f"P={r['prompt_len']}: L{r['depths'][0]} - L{r['depths'][1]} {d.difference:+.2f} "
                     f"[{d.ci[0]:+.2f}, {d.ci[1]:+.2f}]" for r, d in zip(saved, diffs))
    relay = "; ".join(f"P={r['prompt_len']} L{r['depth']}: relay {r['relay']:.2f}" for r in sweep["depth_prompt"])
    verdict, _, below = _every_above_zero(diffs)
    return Judgement(f"last-layer alpha, shallower minus deeper: {text}; below 0 after a Bonferroni correction over "
                     f"{len(diffs)} differences: {len(below)}", None, verdict, dict(differences=saved, relay_alpha=relay))


def _consensus_rows(s, clusters: int):
    return [r for r in s["consensus"]["rows"] if r["clusters_targeted"] == clusters]


def _controlled(rows: list[dict], what: str):
    """The verdict for 'the control reaches the target in every draw', with the free system beside it."""
    control = [r for r in rows if r["gain_ratio"] > 0]
    free = [r for r in rows if r["gain_ratio"] == 0]
    if not control:
        return _unmeasured(f"no controlled {what} run at this profile")
    draws = control[0]["draws"]
    text = (f"{what}: reached by {min(r['reached'] for r in control):.0%} of {draws} random (Q, K, V) draws with the control "
            f"(gain {control[0]['gain_ratio']:g} ||V||), {max((r['reached'] for r in free), default=0):.0%} without; "
            f"largest final {control[0]['measure']} {max(r['final']['max'] for r in control):.2g}")
    return _judged(text, None, all(r["reached"] == 1.0 for r in control),
                   reached_with_control=[r["reached"] for r in control], reached_without=[r["reached"] for r in free],
                   gain_ratio=control[0]["gain_ratio"], draws=draws)


def _adversarial_at(s, gain: float) -> list[dict]:
    """The adversarial search's rows at ``gain`` (one per (n, d) searched)."""
    return [r for r in s["control_threshold"]["adversarial"]["rows"] if abs(r["gain_ratio"] - gain) < 1e-9]


def _consensus(s):
    eps = s["consensus"]["settings"]["eps"]
    judged = _controlled(_consensus_rows(s, 1), f"consensus (diameter < {eps})")
    if judged.verdict == NOT_MEASURED:
        return judged
    guarantee = 2 / eps
    worst = _adversarial_at(s, guarantee)
    if not worst:
        return _unmeasured(judged.measured + f"; the adversary did not search gain {guarantee:g} ||V||", **judged.evidence)
    ok = judged.verdict == "agree" and all(r["reached"] == 1.0 for r in worst)
    shapes = ", ".join(f"n {r['n']}, d {r['d']}" for r in worst)
    text = (judged.measured + f"; adversarial (Q, K, V) at {guarantee:g} ||V||, the theory's gain for eps: worst final "
            f"diameter {max(r['worst'] for r in worst):.2g} ({shapes})")
    return _judged(text, None, ok, **judged.evidence, adversarial_worst=[r["worst"] for r in worst])


def _clusters(s):
    rows = [r for r in s["consensus"]["rows"] if r["clusters_targeted"] > 1]
    ks = sorted({r["clusters_targeted"] for r in rows})
    return _controlled(rows, f"{ks} chosen clusters")


def _multihead(s):
    rows = [r for r in _consensus_rows(s, 1) if r["heads"] > 1]
    heads = sorted({r["heads"] for r in rows})
    return _controlled(rows, f"consensus with {heads} heads")


def _threshold(s):
    ct = s["control_threshold"]
    tr, rows, adv = ct["transition"], ct["rows"], ct["adversarial"]["rows"]
    eps = ct["settings"]["eps"]
    guarantee = 2 / eps
    shapes = sorted({(r["n"], r["d"]) for r in adv})
    evidence = dict(gains=[r["gain_ratio"] for r in rows], reached=[r["reached"] for r in rows], transition=tr,
                    adversarial=[dict(n=r["n"], d=r["d"], gain_ratio=r["gain_ratio"], worst=r["worst"]) for r in adv])
    if not shapes or not any(r["gain_ratio"] <= 1 for r in adv) or not _adversarial_at(s, guarantee):
        return _unmeasured(f"the adversary did not search both a gain at or below ||V|| and {guarantee:g} ||V||", **evidence)
    parts, ok = [], True
    for n, d in shapes:
        mine = sorted((r for r in adv if (r["n"], r["d"]) == (n, d)), key=lambda r: r["gain_ratio"])
        defeated = [r["gain_ratio"] for r in mine if r["reached"] < 1.0]
        held = [r["gain_ratio"] for r in mine if r["reached"] == 1.0]
        ok &= any(g <= 1 for g in defeated) and guarantee in held
        parts.append(f"n {n}, d {d}: consensus defeated at {defeated or 'no gain'}, held at {held or 'no gain'} ||V||")
    grid = ct.get("grid", {}).get("rows", [])
    random_ok = all(r["reached"] == 1.0 for r in rows if r["gain_ratio"] >= guarantee) and all(
        reached == 1.0 for r in grid for g, reached in zip(r["gains"], r["reached"]) if g >= guarantee)
    evidence["grid"] = [dict(n=r["n"], d=r["d"], beta=r["beta"], reached_all=r["reached_all"]) for r in grid]
    every = sorted({r["reached_all"] for r in grid}, key=lambda g: math.inf if g is None else g)
    text = (f"adversarial (Q, K, V): {'; '.join(parts)}; random draws: every draw from {tr['reached_all']} ||V||"
            + (f", and over {len(grid)} (n, d, beta) from {every} ||V||" if grid else "")
            + f"; theory: threshold 1 ||V||, eps guaranteed from {guarantee:g} ||V||")
    return _judged(text, None, ok and random_ok, **evidence)


# ---------------------------------------------------------------- the architecture contrasts (the project's own)

OWN = "the project's own finding (no paper value)"


def _contrast_window(s):
    """Every window variant's offsets exactly 0 beyond each layer's reach l (W - 1), at init and trained."""
    reaches = [(name, when, r) for name, v in s["architecture_contrasts"]["variants"].items() if "window_reach" in v
               for when, layers in v["window_reach"].items() for r in layers]
    if not reaches:
        return _unmeasured("no window variant ran")
    leaks = [f"{name} {when} layer {r['layer']}: offset > 0 at t = {r['last_nonzero']}, reach {r['reach']}"
             for name, when, r in reaches if not r["zero_beyond"]]
    text = (f"{len(reaches) - len(leaks)} of {len(reaches)} (variant, init or trained, layer) exactly 0 beyond the "
            f"reach l (W - 1); last nonzero t per layer: {[r['last_nonzero'] for _, _, r in reaches]}")
    return _judged(text + (f"; {leaks[0]}" if leaks else ""), None, not leaks, leaks=leaks,
                   reach=[r["reach"] for _, _, r in reaches], last_nonzero=[r["last_nonzero"] for _, _, r in reaches])


def _minus_baseline(s, name: str) -> dict[str, AlphaDifference | FitRefused]:
    return {when: fit_from_dict(d) for when, d in s["architecture_contrasts"]["variants"][name]["minus_baseline"].items()}


def _contrast_alibi(s):
    if "ALiBi" not in s["architecture_contrasts"]["variants"]:
        return _unmeasured("the ALiBi variant did not run")
    diffs = _minus_baseline(s, "ALiBi")
    if not _with_interval(diffs.values()):
        return _unmeasured("a difference could not be fitted with an interval",
                           refused=[d.reason for d in diffs.values() if isinstance(d, FitRefused)])
    text = "; ".join(f"{when} {d.difference:+.2f} [{d.ci[0]:+.2f}, {d.ci[1]:+.2f}] on t in {list(d.t_range)}"
                     for when, d in diffs.items())
    return _judged("last layer, alpha(ALiBi) - alpha(RoPE): " + text, [round(v, 3) for v in diffs["init"].ci],
                   all(d.ci[0] > 0 for d in diffs.values()), **{when: d.to_dict() for when, d in diffs.items()})


def _contrast_bias(s):
    names = [n for n in s["architecture_contrasts"]["variants"] if n.startswith("logit bias ")]
    if len(names) < 2:
        return _unmeasured(f"{len(names)} logit-bias strength(s) ran; the criterion needs two or more")
    gammas = [float(n.removeprefix("logit bias ")) for n in names]
    diffs = [_minus_baseline(s, n)["init"] for n in names]
    if not _with_interval(diffs):
        return _unmeasured("a difference could not be fitted with an interval")
    order = np.argsort(gammas)
    points = [diffs[k].difference for k in order]
    text = "last layer at init, alpha(bias) - alpha(none): " + "; ".join(
        f"gamma {gammas[k]:g} {diffs[k].difference:+.2f} [{diffs[k].ci[0]:+.2f}, {diffs[k].ci[1]:+.2f}]" for k in order)
    ok = all(d.ci[1] < 0 for d in diffs) and all(b < a for a, b in zip(points, points[1:]))
    return _judged(text, [round(v, 3) for v in diffs[order[-1]].ci], ok, gammas=[gammas[k] for k in order],
                   difference=points, intervals=[list(diffs[k].ci) for k in order])


# ---------------------------------------------------------------- linear response and sinks (parts linear_response, sinks)

RELATED = "related work (Jacobian token influence in Pythia and Qwen2.5)"
SINK_FACTOR = 10  # a sink: an order of magnitude more attention than dilution gives


# The linear response's model rows: the project's model from its part, SmolLM2 and its config at init
# from the real model's part (which computes them on the pairs whose finite offsets it measures).
OWN_TRAINED, SMOLLM2_TRAINED, SMOLLM2_INIT = ("linear_response", "own trained"), ("real_model", "trained"), ("real_model", "init")
_ROW_NAMES = {OWN_TRAINED: "the project's trained model", SMOLLM2_TRAINED: "SmolLM2", SMOLLM2_INIT: "SmolLM2's config at init"}


def _response_row(s, row: tuple[str, str]) -> dict:
    part, name = row
    return (s[part]["models"] if part == "linear_response" else s[part]["linear_response"])[name]


def _jacobian(s, row: tuple[str, str], key: str):
    """The last layer's record ``key`` of one model row of the linear response."""
    return fit_from_dict(_response_row(s, row)[key][-1])


def _who(s, row: tuple[str, str]) -> str:
    saved = _response_row(s, row)
    return f"{_ROW_NAMES[row]}, {saved['n_pairs']} pairs" + (f", seeds {saved['seeds']}" if saved.get("seeds") else "")


def _jacobian_is_finite(s):
    diff = _jacobian(s, SMOLLM2_TRAINED, "frobenius_minus_finite")
    if not _with_interval([diff]):
        return _unmeasured("the last layer's difference could not be fitted with an interval", refused=_refusals([diff]))
    text = (f"{_who(s, SMOLLM2_TRAINED)}, last layer, alpha(Jacobian) - alpha(finite): {diff.brief()} on t in "
            f"{list(diff.t_range)} (alphas {diff.alpha_a:.2f} and {diff.alpha_b:.2f})")
    own = _jacobian(s, OWN_TRAINED, "frobenius_minus_finite") if OWN_TRAINED[0] in s else None  # beside it, not judged
    return _equivalence(text + ("" if own is None else f"; the project's trained model: {own.brief()}"),
                        [round(v, 3) for v in diff.ci], smollm2=diff.to_dict(), own_trained=own and own.to_dict())


def _jacobian_alpha(row: tuple[str, str], judge_fit: Callable[[PowerLawFit], bool], **evidence):
    """The last layer's Jacobian (Frobenius) alpha of one model row, judged by ``judge_fit``."""
    def judge(s):
        fit, finite = _jacobian(s, row, "frobenius"), _jacobian(s, row, "finite")
        if isinstance(fit, FitRefused):
            return _unmeasured(f"the last layer's Jacobian could not be fitted: {fit.reason}")
        text = f"{fit.brief()} on t in {list(fit.t_range)} ({_who(s, row)}; the finite offsets' alpha {finite.brief()})"
        return _judged(text, _interval(fit), judge_fit(fit), jacobian=fit.to_dict(), finite=finite.to_dict(), **evidence)
    return judge


def _jacobian_no_decay(row: tuple[str, str]):
    """"No decay" of one model row's last-layer Jacobian alpha, by equivalence with 0."""
    def judge(s):
        fit, finite = _jacobian(s, row, "frobenius"), _jacobian(s, row, "finite")
        if not isinstance(fit, PowerLawFit) or fit.ci is None:
            return _unmeasured("the last layer's Jacobian could not be fitted with an interval")
        text = f"{fit.brief()} on t in {list(fit.t_range)} ({_who(s, row)}; the finite offsets' alpha {finite.brief()})"
        return _equivalence(text, _interval(fit), jacobian=fit.to_dict(), finite=finite.to_dict())
    return judge


def _sink_first_token(s):
    sk = s["sinks"]
    dilution, shares = sk["windows"]["dilution_share"], sk["share"]
    sinks = {when: [k for k, v in enumerate(shares[when]["mean"], start=1) if v > SINK_FACTOR * dilution]
             for when in ("trained", "init")}
    n_layers = len(shares["trained"]["mean"])
    text = (f"key 0 takes more than {SINK_FACTOR}x its dilution share ({dilution:.4f}) in {len(sinks['trained'])} of "
            f"{n_layers} layers trained (layers {sinks['trained']}), {len(sinks['init'])} at init; mean share per layer "
            f"trained {min(shares['trained']['mean']):.3f} to {max(shares['trained']['mean']):.3f}")
    ok = len(sinks["trained"]) > n_layers / 2 and len(sinks["init"]) <= n_layers / 2
    return _judged(text, None, ok, sink_layers=sinks, dilution_share=dilution, mean_share=shares)


def _sink_shared(s):
    diffs = _differences(s["sinks"]["shared_minus_different"])
    last = diffs[-1]
    if not _with_interval([last]):
        return _unmeasured("the last layer's difference could not be fitted with an interval", refused=_refusals([last]))
    excluded = [k for k, d in enumerate(diffs, start=1) if isinstance(d, AlphaDifference) and d.ci is not None
                and not d.ci[0] <= 0 <= d.ci[1]]
    text = (f"last layer, alpha(shared) - alpha(different): {last.brief()} on t in {list(last.t_range)}; "
            f"layers whose interval excludes 0: {excluded or 'none'}")
    return _equivalence(text, [round(v, 3) for v in last.ci], last_layer=last.to_dict(), layers_excluding_zero=excluded)


_WINDOW = "alpha fitted on t in [32, T] (ended early where the float32 noise floor, measured against float64, is near)"
_RANGE = ("Agree if the 95 % t-interval of the last layer's alpha over pairs overlaps the paper's range, "
          "disagree if it lies entirely outside it; not measured if the last layer cannot be fitted")
_RISE = ("The rise: the mean local exponent over the last quarter of the log-t bins from t = 4 to T minus over the "
         "first quarter, with a 95 % t-interval over pairs; the relay model's on the same grid at the same P and depth. Agree if in "
         f"every layer the network's interval lies above 0 and the relay model rises by more than {RISE_MARGIN}; "
         "disagree if in some layer they part ways beyond doubt (the network's interval, widened for the number of "
         "layers, above 0 while the relay model does not rise, or below 0 while it does); otherwise not measured.")
_TRAINED = (f"A trained model counts only when its held-out loss levelled off (the last fifth of training lowered it "
            f"by less than {PLATEAU_SHARE:.0%} of its whole drop) and {MIN_SEEDS} seeds were trained and agree; "
            "otherwise not measured at this scale, with the numbers shown.")
CLAIMS = (
    Claim("llm_trained_alpha", "A trained language model forgets fast (SmolLM2-135M-Instruct, last layer)",
          "alpha 0.55 to 0.7", ("real_model",),
          f"Offsets of SmolLM2-135M-Instruct on held-out text pairs; {_WINDOW}. {_RANGE} [0.55, 0.7].",
          _llm_alpha("trained", 0.55, 0.7)),
    Claim("llm_untrained_alpha", "The same architecture at initialisation forgets slowly (SmolLM2's config, last layer)",
          "alpha 0.2 to 0.5", ("real_model",),
          "Offsets of fresh parameters of SmolLM2's exact config with the initialisation its authors state (every weight "
          "matrix N(0, 1/24), the initializer_range of its published config.json), 3 seeds (the interval resamples "
          f"seeds, then pairs within them, 2 degrees of freedom); {_WINDOW}. {_RANGE} [0.2, 0.5]. The solvable relay "
          "model's alpha at the same depth and windows is reported beside: the paper's range is what is judged, not "
          "the theory's prediction.", _llm_alpha("init", 0.2, 0.5)),
    Claim("llm_trained_faster", "The trained language model forgets faster than its initialisation "
          "(every layer, interval of the difference above 0)", "alpha trained > untrained", ("real_model",),
          "Per layer, alpha of the trained model minus alpha at init, fitted on one common window, with one bootstrap "
          "interval of the difference (trained pairs and init seeds-then-pairs resampled independently). Agree if the "
          "interval lies above 0 in every layer; disagree if it reaches 0 or below in any layer; not measured if some "
          "layer's difference cannot be fitted.", _llm_faster),
    Claim("llm_bound_conditions", "The bound's conditions hold on a trained language model: bounded logits, "
          "pre-norm activations away from zero (finite on any finite run: a check)", "B finite, sigma_min > 0", ("real_model",),
          "On the trained model and a few held-out pairs (both runs): the largest |q.k| / sqrt(d_head) per layer must "
          "be finite and the smallest input scale of every block norm above sqrt(eps) (below it the norm no longer "
          "normalises). Fail if either fails in any layer.", _llm_conditions, CHECK),
    Claim("llm_direct_dilution", "The prompt's direct influence is diluted as the context grows (SmolLM2-135M-Instruct, "
          "last layer)", "alpha = 1 for P/(P+t)", ("real_model",),
          "The trained model's offsets split into what continuation tokens read from the prompt directly and what "
          "reaches them by relay; the last layer's direct-read alpha (95 % t-interval over pairs) against the alpha of "
          f"P / (P + t) fitted on the same window. Equivalence, margin {EQUIVALENCE_MARGIN}: agree if the interval of "
          "the difference lies inside it, disagree if it lies wholly outside, otherwise not measured.", _llm_direct),
    Claim("llm_relay_only_logs", "Relay can only add logarithmic factors, on a trained language model: its offsets "
          "decay at least like the relay shape", "slope of offset / shape <= 0", ("real_model",),
          "Per layer of the trained model, the log-log slope of its offsets divided by the relay model's delta_l "
          "(same P, T and depth) over t in [T/16, T], with a t-interval over pairs. Agree if every layer's "
          "interval reaches 0 or below; disagree if any layer's lies above 0. The explicit bound's constants C_l "
          "from the measured conditions are reported beside.", _llm_relay_logs),
    Claim("llm_bias_stops", "(This project) The dilution-cancelling logit bias added at inference (gamma = 1) stops "
          "SmolLM2-135M-Instruct's forgetting (last layer): a real-model test of \"dilution is necessary\", whose "
          "paper statement is about training", OWN, ("real_model",),
          "The trained model's own parameters with gamma log(i / P) added to every attention logit on the prompt keys, "
          "at each gamma measured, on the first pairs of its held-out text pairs; the last layer's alpha at gamma = 1 "
          f"(chosen beforehand), 95 % t-interval over pairs. Equivalence with 0, margin {EQUIVALENCE_MARGIN}: agree if "
          "the interval lies inside it (the forgetting stops), disagree if wholly outside, otherwise not measured. "
          "Each gamma's difference from the model without the bias is reported beside.", _llm_bias_stops),
    Claim("ff_threshold_llm", "The control threshold compared with a real language model across depth (layers whose "
          "MLP-to-attention gain exceeds 1 contract the tokens)", "compared with real LLMs", ("real_model",),
          "Per layer of the trained model, the gain analogue |MLP output| / (bound on any attention output) and the "
          "diameter of the normalised tokens (medians over text windows). Agree if the layers with a gain analogue above "
          "1 shrink the diameter on average and more than the layers below 1; disagree otherwise; not measured if no "
          "layer (or every layer) is above 1, where no threshold can be located.", _llm_threshold),
    Claim("power_law", "The offset decays approximately as a power law t^-alpha (within a stated tolerance)",
          "d(t) ~ t^-alpha", ("untrained_alpha",),
          "The last layer of the deepest small untrained model (chosen beforehand), on its alpha fit's window, of at "
          f"least {MIN_DECADES} decades: the largest |log residual| of the best power law over the log-binned mean curve, "
          "and the largest |log residual| on the window's second half of the power law fitted to its first half, each "
          f"with a 95 % t-interval over pairs. Agree if both intervals end at or below {POWER_LAW_TOLERANCE} (about "
          f"{POWER_LAW_TOLERANCE:.0%}); disagree if either starts above it; not measured otherwise or on a shorter "
          f"window. Reported beside: the verdict at {', '.join(f'{t:g}' for t in POWER_LAW_TOLERANCES)}, every layer's "
          "deviations, and the alternatives (log-power, relay shape, exponential, stretched exponential) by error "
          "cross-validated over pairs.", _power_law),
    Claim("untrained_alpha", "Untrained models forget slowly (small models, d_model 128)", "alpha 0.2 to 0.5",
          ("untrained_alpha",), f"The deepest small untrained model; {_WINDOW}. {_RANGE} [0.2, 0.5].", _untrained),
    Claim("trained_alpha", "Trained models forget fast (small byte-level model trained minutes on a CPU)",
          "alpha 0.55 to 0.7", ("trained_vs_untrained",),
          "The small byte-level model after training, held-out text pairs; alpha fitted on t in [32, C - P], inside its "
          f"training context C (the fit beyond it, where RoPE extrapolates, is reported beside). {_RANGE} [0.55, 0.7]. "
          + _TRAINED,
          _trained_enough(_trained)),
    Claim("trained_faster", "Trained models forget faster than untrained ones (small byte-level model; every layer, "
          "interval of the difference above 0)", "alpha trained > untrained", ("trained_vs_untrained",),
          "Per layer, alpha after training minus alpha at its initialisation on the same pairs, on t in [32, C - P] "
          "inside the training context C, with one t-interval of the difference. Agree if it lies above 0 in "
          "every layer; disagree if it reaches 0 or below in any layer; not measured if a layer cannot be fitted. "
          + _TRAINED, _trained_enough(_trained_faster)),
    Claim("bound_conditions", "The bound's conditions hold on the small untrained models: bounded logits, pre-norm "
          "activations away from zero", "B finite, sigma_min > 0", ("bound_check",),
          "As for the language model, on the small untrained models at every depth measured. Fail if any "
          "condition fails.", _conditions, CHECK),
    Claim("bound_holds", "The explicit bound C_L P (log t)^(L-1) / t is never exceeded (small untrained models; "
          "margins of thousands: an implementation check)",
          "offset <= C_L P (log t)^(L-1) / t", ("bound_check",),
          "The explicit bound, with constants computed from the measured conditions, against the largest offset over "
          "pairs at every layer and t. Agree if the bound is at or above every measured offset, disagree if any offset "
          "exceeds it; not measured where the bound does not apply.", _bound_holds, CHECK),
    Claim("trained_bound", "The bound applies to and holds on a trained model (small byte-level model, inside its "
          "training context)", "conditions hold; offset <= bound", ("trained_vs_untrained",),
          "The small model after training, held-out text pairs cut to its training context (t <= C - P): the "
          "conditions as above, the explicit bound from them against every offset, and the shape test (slope of "
          "offset / relay shape on [T/16, T]). Agree if the conditions hold, the bound is at or above every offset and "
          "every layer's slope interval reaches 0 or below; disagree if any of these fails; not measured if the bound "
          "or the shape test cannot be computed. " + _TRAINED, _trained_bound),
    Claim("relay_only_logs", "Relay can only add logarithmic factors: offsets decay at least like the relay shape",
          "slope of offset / shape <= 0", ("bound_check",),
          "Per layer, the log-log slope of offset / relay-model offset over t in [T/16, T]. Agree if every layer's "
          "interval reaches 0 or below; disagree if any layer's interval lies above 0 (offsets decaying more slowly "
          "than the relay shape).", _relay_logs),
    Claim("direct_is_dilution", "The direct read of an untrained model (near-uniform attention) dilutes as P/(P+t)",
          "alpha = 1 for P/(P+t)", ("direct_vs_relay",),
          "Per layer, alpha of the direct-read part of the offset against alpha of P / (P + t) fitted on the same "
          "window. Pass if every layer is within 0.1 of it, fail otherwise.", _direct, CHECK),
    Claim("bound_tight", "The solvable linear relay model attains the bound: it cannot be improved",
          "delta_L ~ P (log t)^(L-1) / ((L-1)! t)", (), "A mathematical statement about the relay model, proved in "
          "theory/ and checked there; no measurement of a model can contradict it.",
          _proved("bound_tight_check", "a statement proved about the solvable model, not a measurement")),
    Claim("bound_tight_check", "The exact relay model's delta_L approaches P (log t)^(L-1) / ((L-1)! t) from below",
          "delta_L ~ P (log t)^(L-1) / ((L-1)! t)", ("relay_model",),
          "The exact relay model's delta_L / (P (log t)^(L-1) / t) for L >= 2 out to t = 1e12. Agree if it rises "
          "monotonically, stays at or below 1 / (L-1)! and ends above half of it; fail otherwise.", _bound_tight, CHECK),
    Claim("exponent_rise", "The relay model reproduces the rise of the local exponent towards 1 seen in untrained networks",
          "local exponent rises with t", ("untrained_vs_relay",),
          "Every layer >= 2 of a small untrained network. " + _RISE, _exponent_rise),
    Claim("llm_exponent_rise", "The relay model reproduces the rise of the local exponent towards 1 seen in untrained "
          "networks (SmolLM2's config at its stated initialisation)", "local exponent rises with t", ("real_model",),
          "Layers 2, L/2 and L (chosen beforehand) of SmolLM2's config at its stated initialisation, every seed's pairs "
          "(the interval over seeds, then pairs). " + _RISE, _llm_exponent_rise),
    Claim("no_bias_trained", "Without the logit bias, trained models forget (last layer, last step)", "alpha 0.55 to 0.7",
          ("logit_bias",), "The model trained without the bias, at the last measured step, alpha on t in [32, C - P] "
          f"inside its training context C. {_RANGE} [0.55, 0.7]. " + _TRAINED,
          _bias_last_step("no_bias", lambda f: _overlaps(f, 0.55, 0.7))),
    Claim("bias_stops_decay", "Cancelling dilution with a logit bias stops the decay early in training", "alpha ~ 0",
          ("logit_bias",), "The same model trained with and without the bias (same seed, same pairs), alpha on t in "
          f"[32, C - P]. Premise: at step 0 the two alphas are equal (the interval of their difference contains 0). "
          f"Agree if at some step in the first {EARLY_FRACTION:.0%} of training the biased alpha's interval contains 0 "
          f"or ends below {NEAR_ZERO} while the difference's interval lies below 0; disagree if no early step does; "
          "not measured if the premise fails or no step that early was measured.", _bias_stops),
    Claim("bias_reverses", "With the logit bias the decay reverses later in training (offsets grow)", "alpha < 0",
          ("logit_bias",), "The model trained with the bias, at the last measured step, alpha on t in [32, C - P]. Agree "
          "if its interval lies entirely below 0, disagree otherwise. " + _TRAINED,
          _bias_last_step("bias", lambda f: _interval(f) is not None and _interval(f)[1] < 0)),
    Claim("dilution_sufficient", "Dilution is sufficient for the forgetting (untrained networks and the solvable model)",
          "alpha > 0 without training", (), "Not measured: the project's test zeroes every query so that attention "
          "only dilutes, and there a positive alpha follows by arithmetic (shares exactly P / (P + t)); it is the check "
          "dilution_sufficient_check. A test on models whose attention is not forced to dilute is not built.",
          _proved("dilution_sufficient_check", "with attention forced to dilute, forgetting follows by arithmetic")),
    Claim("dilution_sufficient_check", "Networks whose attention only dilutes forget (queries zeroed: an identity)",
          "alpha > 0 without training", ("dilution",),
          "Small untrained networks with every query projection zeroed, so every attention logit is exactly 0 and "
          "the prompt's share of attention is exactly P / (P + t): dilution is the only thing in attention that "
          "changes with t. Alpha per layer on t in [32, T] at every depth, the interval over seeds, then pairs. "
          "Agree if every layer's interval lies above 0; disagree if any reaches 0 or below; not measured if a layer "
          "cannot be fitted. The relay model's alpha on the same windows is reported beside.", _sufficient, CHECK),
    Claim("dilution_necessary", "Dilution is necessary: cancelling it with the logit bias stops the forgetting",
          "alpha ~ 0 with the bias", (), "The paper's evidence is training with the bias (the rows bias_stops_decay and "
          "bias_reverses); the project's uniform-attention test holds by arithmetic (the check dilution_necessary_check). "
          "A test on the trained real model with the bias added at inference is not built yet.",
          _proved("dilution_necessary_check", "on uniform attention the bias holds the prompt's share fixed by construction")),
    Claim("dilution_necessary_check", "With attention forced to dilute, the dilution-cancelling bias stops the "
          "forgetting (an identity)", "alpha ~ 0 with the bias", ("dilution",),
          "The same networks (same parameters, seeds and pairs) with the dilution-cancelling bias gamma log(i / P) on "
          "the prompt keys, which holds the prompt's share of attention near 1/2. Agree if in every layer the biased "
          f"alpha's interval contains 0 or ends below {NEAR_ZERO} and the interval of alpha without minus with the "
          "bias lies above 0; fail if any layer fails either; not measured if a layer cannot be fitted.", _necessary, CHECK),
    Claim("deeper_remembers_longer", "Each layer of relay adds a log factor: deeper models forget more slowly "
          "(last layer, difference above 0 at each step in depth)", "alpha falls with depth L", ("depth_length_sweep",),
          "At every prompt length, the last layer's alpha of untrained models of neighbouring depths, shallower minus "
          "deeper, with one interval of the difference (seeds, then pairs, resampled). Agree if every such interval "
          "lies above 0; disagree if any reaches 0 or below; not measured if a difference cannot be fitted.", _depth),
    Claim("ff_consensus", "A feed-forward control steers the tokens arbitrarily close to consensus whatever Q, K, V are",
          "every (Q, K, V)", (), "A theorem of the second paper; its simulation at the gain from which the proof "
          "guarantees eps is the check ff_consensus_check. No measurement of a model can contradict it.",
          _proved("ff_consensus_check", "a theorem, simulated where the proof guarantees it")),
    Claim("ff_consensus_check", "Consensus under the control at the gains the proof covers (random and adversarial "
          "(Q, K, V))", "every (Q, K, V)", ("consensus", "control_threshold"),
          "Tokens on the sphere under the consensus control: random (Q, K, V) draws at the profile's gain, and (Q, K, V) "
          "found by gradient ascent on the diameter through the simulation (worst cases) at the gain 2 / eps ||V|| from "
          "which the theory guarantees eps. Agree if every random and every adversarial draw ends with a diameter below "
          "eps; fail if any does not.", _consensus, CHECK),
    Claim("ff_clusters", "The control result extends to convergence to several clusters", "every (Q, K, V)", (),
          "A theorem; simulated as the check ff_clusters_check.", _proved("ff_clusters_check", "a theorem")),
    Claim("ff_clusters_check", "The cluster control reaches its targets (random (Q, K, V), gain 40 ||V||)",
          "every (Q, K, V)", ("consensus",), "As consensus (random draws only), with a control towards k chosen targets; the control knows "
          "each token's index, which assigns its target (side information a feed-forward layer has only through "
          "positions). Agree if every controlled draw ends within eps of its assigned target; disagree otherwise.",
          _clusters, CHECK),
    Claim("ff_multihead", "The control result extends to multi-head attention", "every (Q, K, V)", (),
          "A theorem; simulated as the check ff_multihead_check.", _proved("ff_multihead_check", "a theorem")),
    Claim("ff_multihead_check", "The control reaches consensus with several heads (random (Q, K, V), gain 40 ||V||)",
          "every (Q, K, V)", ("consensus",),
          "As consensus (random draws only), with several attention heads. Agree if every controlled draw reaches "
          "consensus; fail otherwise.", _multihead, CHECK),
    Claim("ff_threshold", "Consensus shows a threshold in the control gain (theory: gain > ||V|| suffices)",
          "threshold at gain ~ ||V||", ("control_threshold",),
          "Final diameter against the control gain r (units of ||V||), for random draws and for (Q, K, V) found by "
          "gradient ascent on the diameter through the simulation, at every (n, d) searched, and random draws at several "
          "(n, d, inverse temperature beta) on a coarser grid (||V|| needs no sweep: in these units the dynamics do not "
          "depend on it). The theory: nothing is "
          "guaranteed at r <= 1, eps is guaranteed from r = 2 / eps. Agree if at every (n, d) the adversary defeats "
          "consensus at some r <= 1 and no draw, random or adversarial, misses eps at r = 2 / eps or above; disagree "
          "otherwise (a threshold below ||V||, or a failure where eps is guaranteed); not measured if those gains were "
          "not searched.", _threshold),
    Claim("contrast_window_reach", "(This project) Beyond a sliding window W the prompt reaches a layer-l state only "
          "through relay, from at most l (W - 1) positions back", OWN, ("architecture_contrasts",),
          "Every layer l of every window variant, at init (every seed) and after training: the offset is exactly 0, bit "
          "for bit, at every t > l (W - 1). Pass if so; fail if any offset beyond the reach is above 0 (an exact "
          "receptive-field identity: a check).", _contrast_window, CHECK),
    Claim("contrast_alibi_faster", "(This project) ALiBi shortens the prompt's influence against RoPE (the prompt's "
          "share of attention falls exponentially with distance instead of diluting as 1/t)", OWN,
          ("architecture_contrasts",),
          "The last layer's alpha of ALiBi minus that of the same architecture with RoPE, on a common window above both "
          "noise floors, at init (interval over seeds, then pairs) and after the same training (over pairs). Agree if "
          "both intervals lie above 0; disagree otherwise; not measured if either difference is refused.",
          _contrast_alibi),
    Claim("contrast_bias_slows", "(This project) The dilution-cancelling logit bias slows forgetting at every "
          "strength gamma, the more the larger gamma", OWN, ("architecture_contrasts",),
          "At init, the last layer's alpha with the bias at each gamma minus that without, on a common window (interval "
          "over seeds, then pairs). Agree if every interval lies below 0 and the differences fall as gamma grows; "
          "disagree otherwise; not measured with fewer than two strengths.", _contrast_bias),
    Claim("jacobian_is_finite", "(This project) The prompt's linear response (the Jacobian's norm) decays with the "
          "finite offsets' exponent (SmolLM2-135M-Instruct, last layer)", OWN, ("real_model",),
          "On the same held-out text pairs: alpha of the Frobenius norm of d h_L(P + t - 1) / d (prompt embeddings) "
          "minus alpha of the finite offsets, fitted on one common window above the finite offsets' noise floor, one "
          f"t-interval (both sides resampled independently). Equivalence, margin {EQUIVALENCE_MARGIN}: agree if the "
          "interval lies inside it, disagree if wholly outside, otherwise (or if the difference is refused) not "
          "measured.", _jacobian_is_finite),
    Claim("jacobian_trained_range", "(Related work) The Jacobian's token influence in trained language models decays "
          "as t^-alpha with alpha about 0.7 to 0.9 (SmolLM2-135M-Instruct, last layer)", f"{RELATED}: alpha 0.7 to 0.9",
          ("real_model",),
          "The Frobenius norm of d h_L(P + t - 1) / d (prompt embeddings) on held-out text pairs, fitted on t in [32, T] "
          "(no noise floor: a tangent is not a difference of nearly equal states). Agree if its 95 % interval over pairs "
          "overlaps [0.7, 0.9], disagree if it lies entirely outside; not measured if it cannot be fitted.",
          _jacobian_alpha(SMOLLM2_TRAINED, lambda fit: _overlaps(fit, 0.7, 0.9), related_range=[0.7, 0.9])),
    Claim("jacobian_absent_at_init", "(Related work) At random initialisation the Jacobian's token influence does not "
          "decay (SmolLM2's config, last layer)", f"{RELATED}: no decay at random init", ("real_model",),
          "The same Jacobian norm on fresh parameters of SmolLM2's config, several seeds (interval over seeds, then "
          f"pairs). Equivalence with no decay, margin {EQUIVALENCE_MARGIN}: agree if alpha's interval lies inside "
          "it, disagree if wholly outside, otherwise (or if it cannot be fitted) not measured.",
          _jacobian_no_decay(SMOLLM2_INIT)),
    Claim("sink_first_token", "(This project) SmolLM2's first token is an attention sink, which training made: it "
          f"takes more than {SINK_FACTOR} times its dilution share in most layers, and not at initialisation", OWN,
          ("sinks",),
          "The attention weight on key 0, mean over heads, over the queries of the later half of held-out text windows, "
          f"per layer, against dilution's mean of 1 / (i + 1) over the same queries. Agree if it exceeds {SINK_FACTOR} "
          "times that in more than half of the trained model's layers and in at most half at init (fresh parameters of "
          "the same config); disagree otherwise.", _sink_first_token),
    Claim("sink_shared_first_token", "(This project) A shared first token (the sink) does not change how fast the "
          "prompt is forgotten (SmolLM2-135M-Instruct, last layer)", OWN, ("sinks",),
          "The real model's held-out text pairs measured as cut and with prompt b's first token set to prompt a's: the "
          "last layer's alpha(shared) minus alpha(different) on a common window above both noise floors, one interval. "
          f"Equivalence, margin {EQUIVALENCE_MARGIN}: agree if the interval lies inside it, disagree if wholly "
          "outside, otherwise (or if the difference is refused) not measured.", _sink_shared),
)


def part_claims_text(part: str, summary: dict) -> str:
    """The claims judged on one part's summary alone, one line each (an experiment's printout)."""
    return "\n".join(f"{c.claim}: {j.verdict}; {j.measured}" for c in CLAIMS if c.parts == (part,)
                     for j in (c.judge({part: summary}),))


def judge_claims(summaries: dict, why_absent: dict | None = None) -> list[dict]:
    """The claims table: one dict per claim (and check) with id, kind, claim, paper_value, criterion, measured, interval,
    verdict, evidence and parts. ``why_absent``: part name -> why it has no summary (a claim that reads it is
    not measured, for that reason)."""
    rows = []
    for claim in CLAIMS:
        absent = [p for p in claim.parts if p not in summaries]
        if not absent:
            judged = claim.judge(summaries)
        else:
            judged = _unmeasured("; ".join(f"{p}: {(why_absent or {}).get(p, 'the part did not run')}" for p in absent))
        if judged.verdict not in VERDICTS:
            raise ValueError(f"claim {claim.id}: verdict {judged.verdict!r} is not one of {VERDICTS}")
        rows.append(dict(id=claim.id, kind=claim.kind, claim=claim.claim, paper_value=claim.paper_value, criterion=claim.criterion,
                         measured=judged.measured, interval=judged.interval, verdict=judged.verdict,
                         evidence=judged.evidence, parts=list(claim.parts)))
    return rows
