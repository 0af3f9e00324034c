"""The criteria several claims share, stated once: the verdict helpers, equivalence, "above 0 in
every layer", the relay-shape test, the local exponent's rise, what counts as trained, and the
criterion texts the claims quote.

A judge (``claims.Claim``) applies its criterion to its part's typed summary and returns a
``claims.Judgement``; these are the pieces judges of several parts use. Conventions (the
project's definitions: docs/definitions.md): intervals are 95 % t-intervals over prompt pairs
with a bootstrap standard error (``fit.t_interval``; over seeds, then pairs, where the models are
fresh initialisations; a difference between two conditions measured on the same pairs is paired,
``fit.paired_alpha_difference``), whose coverage ``tests/test_coverage.py`` checks by simulation. A "no
effect" claim is judged by equivalence (``EQUIVALENCE_MARGIN``): agree only when the whole
interval lies inside the margin, so a wider, noisier interval cannot agree. Rows that test "every
layer" agree only when every layer's own 95 % interval does (an intersection-union test, which
needs no correction); they disagree only beyond a Bonferroni correction over the layers.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from nohair_jax.bound.records import ShapeCheck, shape_from_dict
from nohair_jax.claims import NOT_MEASURED, Judgement
from nohair_jax.fit import AlphaDifference, FitRefused, PowerLawFit, bonferroni, fit_from_dict, fit_power_law
from nohair_jax.plateau import CONFIDENCE, MAX_DROP, counts_as_levelled

EQUIVALENCE_MARGIN = 0.1  # "no effect" on alpha: the whole interval of the difference inside +-0.1
TRAINED_RANGE = (0.55, 0.7)  # the papers' alpha of trained models
UNTRAINED_RANGE = (0.2, 0.5)  # the papers' alpha of untrained models


def judged(measured: str, interval, ok: bool, **evidence) -> Judgement:
    """"agree" if ``ok`` else "disagree", with what was ``measured`` (text), its ``interval`` and the ``evidence``."""
    return Judgement(measured, interval, "agree" if ok else "disagree", evidence)


def decided(measured: str, interval, verdict: str, **evidence) -> Judgement:
    """The ``verdict`` a three-way rule gave (``in_range``, ``beyond``), with what was ``measured``, its
    ``interval`` and the ``evidence``."""
    return Judgement(measured, interval, verdict, evidence)


def unmeasured(measured: str, **evidence) -> Judgement:
    """"not measured at this scale", with what was ``measured`` (text, saying why) and the ``evidence``."""
    return Judgement(measured, None, NOT_MEASURED, evidence)


def equivalence(measured: str, interval, margin: float = EQUIVALENCE_MARGIN, **evidence) -> Judgement:
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


def proved(check: str, why: str):
    """The judge of a statement that is proved rather than measured: no data on models can
    contradict it, so its row says so and names the check that verifies it."""
    return lambda: unmeasured(f"{why}; verified by the check {check}")


def every_above_zero(diffs: list[AlphaDifference]) -> tuple[str, list[int], list[int]]:
    """A row that says "above 0 in every layer": agree when every interval lies above 0 (each at 95 %:
    all of them must hold, so no correction is needed), disagree when some interval widened for the
    number of layers (``fit.bonferroni``) lies below 0, otherwise not measured. Returns (verdict,
    the layers above 0, the layers below 0 after the correction)."""
    above = [k for k, d in enumerate(diffs, start=1) if d.ci[0] > 0]
    below = [k for k, d in enumerate(diffs, start=1)
             if (wide := bonferroni(d.ci, d.dof, len(diffs), d.confidence)) is not None and wide[1] < 0]
    verdict = "agree" if len(above) == len(diffs) else "disagree" if below else NOT_MEASURED
    return verdict, above, below


def every_below_zero(diffs: list[AlphaDifference]) -> tuple[str, list[int], list[int]]:
    """``every_above_zero``'s mirror, for a row that says "below 0 in every comparison": agree when every
    interval lies below 0, disagree when some interval widened for their number lies above 0. Returns
    (verdict, the comparisons below 0, those above 0 after the correction), 1-based."""
    return every_above_zero([dataclasses.replace(d, difference=-d.difference, ci=(-d.ci[1], -d.ci[0]),
                                                 alpha_a=d.alpha_b, alpha_b=d.alpha_a) for d in diffs])


def read_fits(saved: list[dict]) -> list[PowerLawFit | FitRefused]:
    """The fits of a summary's list of saved fits (``fit.fit_from_dict``)."""
    return [fit_from_dict(f) for f in saved]


def alpha_text(fit: PowerLawFit | FitRefused) -> str:
    """alpha to two decimals, or "no fit" where the ``fit`` was refused."""
    return f"{fit.alpha:.2f}" if isinstance(fit, PowerLawFit) else "no fit"


def alpha_interval(fit: PowerLawFit | FitRefused) -> list | None:
    """alpha's interval rounded for the table; None where refused or without one."""
    ci = fit.ci if isinstance(fit, PowerLawFit) else None
    return None if ci is None else [round(ci[0], 3), round(ci[1], 3)]


def read_differences(saved: list[dict]) -> list[AlphaDifference | FitRefused]:
    """The differences of a summary's list of saved ones (``fit.fit_from_dict``)."""
    return [fit_from_dict(d) for d in saved]


def all_with_interval(diffs) -> bool:
    """Every difference fitted, each with an interval."""
    return all(isinstance(d, AlphaDifference) and d.ci is not None for d in diffs)


def difference_ci(diff: AlphaDifference | FitRefused) -> list | None:
    """The interval of a difference ``diff``; None where refused or without one."""
    return list(diff.ci) if isinstance(diff, AlphaDifference) and diff.ci is not None else None


def refusals(diffs) -> list[str | None]:
    """Why each of ``diffs`` was refused (None where it was fitted)."""
    return [d.reason if isinstance(d, FitRefused) else None for d in diffs]


def in_range(fit: PowerLawFit | FitRefused, lo: float, hi: float, margin: float = EQUIVALENCE_MARGIN) -> str:
    """alpha against a paper's range [``lo``, ``hi``], by equivalence: agree when alpha's interval lies inside
    the range widened by ``margin`` on each side, disagree when it lies wholly outside that, otherwise (or
    without an interval) not measured. An interval that merely touches the range no longer agrees: more
    noise can no longer make agreement easier."""
    ci = alpha_interval(fit)
    if ci is None:
        return NOT_MEASURED
    if lo - margin < ci[0] and ci[1] < hi + margin:
        return "agree"
    return "disagree" if ci[1] < lo - margin or ci[0] > hi + margin else NOT_MEASURED


def beyond(interval, threshold: float, *, above: bool) -> str:
    """A directional statement (alpha < 0, a difference > 0): agree when ``interval`` lies wholly above
    ``threshold`` (``above``; else wholly below it), disagree when it lies wholly on the other side, otherwise
    (it contains the threshold, or there is no interval) not measured."""
    if interval is None:
        return NOT_MEASURED
    lo, hi = interval
    if (lo > threshold) if above else (hi < threshold):
        return "agree"
    return "disagree" if ((hi < threshold) if above else (lo > threshold)) else NOT_MEASURED


def at_least(measured: str, difference, margin: float = EQUIVALENCE_MARGIN, **evidence) -> Judgement:
    """A bound, "decays at least as fast", by a one-sided non-inferiority test (``beyond``) on the interval
    ``difference`` of alpha minus the bound's alpha: agree when it lies above ``-margin``, disagree when it lies
    wholly below it, otherwise not measured (the data cannot tell)."""
    verdict = beyond(difference, -margin, above=True)
    words = {"agree": f"above -{margin:g}: at least as fast", "disagree": f"wholly below -{margin:g}: slower",
             NOT_MEASURED: f"the interval reaches below -{margin:g} and above it: too wide to tell"}[verdict]
    return Judgement(f"{measured}; {words}", difference, verdict, dict(evidence, margin=margin))


SLOPE_MARGIN = 0.1  # "decays at least like the relay shape": offset / shape grows by at most t^0.1 on [T/16, T]


def shape_test(saved: list[dict]) -> tuple[str, list | None, str, dict] | None:
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


def value_text(value: float, ci) -> str:
    """``value`` to three decimals, with its interval ``ci`` where there is one."""
    return f"{value:.3f}" + ("" if ci is None else f" [{ci[0]:.3f}, {ci[1]:.3f}]")


MIN_SEEDS = 3  # a small trained model supports a claim only when this many seeds were trained and agree


def short_of_trained(runs: list[dict]) -> str | None:
    """Why small trained models cannot support a claim (too few seeds; a run whose held-out loss did not
    level off: ``plateau.levelled_off``'s verdict saved as the run's ``plateau``, decided again here from its
    numbers by ``plateau.counts_as_levelled``), or None when they can."""
    seeds = len({run.get("seed") for run in runs})
    reasons = [f"{seeds} seed(s) trained, {MIN_SEEDS} needed"] if seeds < MIN_SEEDS else []
    for run in runs:
        name = f"seed {run.get('seed', '?')}" + (f" (logit bias gamma {run['gamma']:g})" if run.get("gamma") else "")
        verdict = run.get("plateau")
        if verdict is None or "drop" not in verdict:
            reasons.append(f"{name}: no stopping-rule verdict was saved")
        elif not counts_as_levelled(verdict["drop"], verdict["upper"]):
            numbers = ("no drop fitted" if verdict["drop"] is None else f"drop per doubling {verdict['drop']:+.4f}, "
                       f"upper bound {verdict['upper']:+.4f} bits per byte")
            reasons.append(f"{name} not levelled off at {verdict['step']} steps ({numbers}; levelled: below "
                           f"{MAX_DROP:g} and {2 * MAX_DROP:g}): {verdict['reason']}")
    return "; ".join(reasons) or None


def seeds_agree(seeds: list[int], judged: list[Judgement], runs: list[dict]) -> Judgement:
    """One verdict from every seed's ``judged`` (in the order of ``seeds``) on small trained models: agree or
    disagree only when ``runs`` (every run the judgements read) count as trained (``short_of_trained``) and every
    seed gives that verdict, otherwise not measured at this scale, with every seed's numbers shown."""
    measured = "; ".join(f"seed {s}: {j.measured}" for s, j in zip(seeds, judged))
    evidence = dict(judged[0].evidence, seeds=list(seeds), verdict_per_seed=[j.verdict for j in judged],
                    plateau=[r.get("plateau") for r in runs])
    short = short_of_trained(runs)
    if short:
        return Judgement(f"{measured}; not trained enough to judge: {short}", judged[0].interval, NOT_MEASURED, evidence)
    verdicts = {j.verdict for j in judged}
    verdict = verdicts.pop() if len(verdicts) == 1 else NOT_MEASURED
    return Judgement(measured + ("" if verdict != NOT_MEASURED or len(judged) == 1 else "; the seeds differ"),
                     judged[0].interval, verdict, evidence)


def dilution_alpha(prompt_len: int, t_range: list) -> float:
    """alpha of the pure dilution curve P / (P + t) fitted on the same window."""
    t = np.arange(t_range[0], t_range[1] + 1, dtype=np.float64)
    return fit_power_law(t, prompt_len / (prompt_len + t), t_min=t_range[0], n_boot=0).alpha


RISE_MARGIN = 0.05  # a local exponent "rises" across the window by more than this, first to last quarter
# The rise of the local exponent is measured from t = 4, as stated before the data: t = 1..3 are bins of one
# position each, whose noise alone moves the first quarter's exponents.
RISE_T_MIN = 4


def rise(layers: list[dict]) -> Judgement:
    """The relay model reproduces the network's rise of the local exponent (``fit.local_exponent_rise``,
    first to last quarter of the log bins), layer by layer, with one definition for both: a curve rises
    where its rise exceeds ``RISE_MARGIN``. The relay model's rise is exact; the network's is decided
    beyond doubt where its interval lies wholly on one side of the margin. Agree when every layer is
    decided and on the relay model's side; disagree when in some layer the network's interval, widened
    for the number of layers, lies wholly on the other side; otherwise not measured."""
    if not layers:
        return unmeasured("needs depth >= 2")
    rises = [fit_from_dict(row["rise"]) for row in layers]
    relay = [row["relay_rise"] > RISE_MARGIN for row in layers]
    wide = [bonferroni(r.ci, r.dof, len(rises), r.confidence) for r in rises]
    side = lambda ci, up: ci is not None and (ci[0] > RISE_MARGIN if up else ci[1] < RISE_MARGIN)  # noqa: E731
    verdict = ("agree" if all(side(r.ci, up) for r, up in zip(rises, relay))
               else "disagree" if any(side(w, not up) for w, up in zip(wide, relay)) else NOT_MEASURED)
    text = "local exponent, first to last quarter of t: " + "; ".join(
        f"layer {row['layer']}: {r.first:.2f} -> {r.last:.2f}, rise {r.brief()} (relay {row['relay_rise']:+.2f})"
        for row, r in zip(layers, rises))
    return Judgement(text, None, verdict, dict(network_rise=[r.to_dict() for r in rises],
                                               relay_rise=[row["relay_rise"] for row in layers],
                                               layers=[row["layer"] for row in layers]))


def near_zero(fit: PowerLawFit | FitRefused) -> bool:
    """The decay has stopped, judged by equivalence: alpha's whole interval lies inside the margin
    ``+-EQUIVALENCE_MARGIN`` (an interval that merely contains 0, however wide, does not count)."""
    ci = alpha_interval(fit)
    return ci is not None and -EQUIVALENCE_MARGIN < ci[0] and ci[1] < EQUIVALENCE_MARGIN


def clearly_decays(fit: PowerLawFit | FitRefused) -> bool:
    """alpha's whole interval lies above the margin ``EQUIVALENCE_MARGIN``: the prompt is being forgotten."""
    ci = alpha_interval(fit)
    return ci is not None and ci[0] > EQUIVALENCE_MARGIN


# The texts the criteria of several claims quote.
OWN = "the project's own finding (no paper value)"
WINDOW_CRITERION = "alpha fitted on t in [32, T] (ended early where the float32 noise floor, measured against float64, is near)"


def range_criterion(lo: float, hi: float) -> str:
    """The criterion of a last layer's alpha against the paper's range [``lo``, ``hi``] (``in_range``)."""
    return (f"Agree if the 95 % t-interval of the last layer's alpha over pairs lies inside the paper's range [{lo:g}, "
            f"{hi:g}] widened by the equivalence margin {EQUIVALENCE_MARGIN:g} on each side, disagree if it lies wholly "
            "outside the widened range, otherwise (or if the last layer cannot be fitted) not measured.")


RISE_CRITERION = (f"The rise: the mean local exponent of the pairs' geometric-mean curve over the last quarter of "
                  f"the log-t bins from t = {RISE_T_MIN} to T minus over the first quarter (the mean of the pairs' own "
                  "rises), with a 95 % t-interval over pairs (over seeds where there are several); the relay model's "
                  "(the solvable one without residual, a = 0) on the same grid at the same P and depth. A curve rises "
                  f"where its rise exceeds {RISE_MARGIN}. Agree if in every layer the network's interval lies wholly on "
                  f"the relay model's side of {RISE_MARGIN}; disagree if in some layer it lies, widened for the number "
                  "of layers (Bonferroni), wholly on the other side; otherwise not measured.")
ABOVE_ZERO_CRITERION = ("Agree if every interval lies above 0 (each at 95 %: all must hold, so no correction is needed); "
                        "disagree if some interval, widened for their number (Bonferroni), lies below 0; otherwise not "
                        "measured, as where some difference cannot be fitted.")
# The relay-shape test (``shape_test``): when it agrees, and when it disagrees.
SHAPE_AGREE = (f"every layer's slope interval ends at or below {SLOPE_MARGIN} (offset / shape grows by at most "
               f"t^{SLOPE_MARGIN})")
SHAPE_DISAGREE = f"some layer's interval, widened for the number of layers (Bonferroni), starts above {SLOPE_MARGIN}"
PAIRED_CRITERION = ("one paired t-interval (both conditions were measured on the same pairs, same texts, seeds and order, "
                    "which are resampled together, whole seeds where there are several, so that what a pair adds to both "
                    "alphas cancels; n - 1 degrees of freedom over n pairs or seeds)")
TRAINED_CRITERION = ("A trained model counts only when its held-out loss levelled off (trained in doubling stages; after a "
                     f"stage the drop per doubling of the steps, fitted over the last doubling, is below {MAX_DROP:g} bits "
                     f"per byte and its one-sided {CONFIDENCE * 100:g} % upper bound below twice that) and {MIN_SEEDS} "
                     "seeds were trained and agree; otherwise not measured at this scale, with the numbers shown. "
                     "Its window ends where its training context does (a RoPE model is not read at positions it never "
                     "trained on): about half a decade of t for these small models, far shorter than the windows of "
                     "the papers' language models, so a verdict speaks of that window.")
