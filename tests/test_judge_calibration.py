"""Calibration of the judges several claims share (``nohair_jax.criteria``): their error rates on synthetic
offset curves whose verdict is known, at the windows and pair counts the rows use.

The "approximately a power law" judge has its own harness (tests/test_power_law_calibration.py); this one covers
the others, each through the code the experiments call, not a re-implementation: synthetic per-pair offset curves
go to the fit or difference function the row calls, its records to the criterion function.

Judges (``JUDGES``; each with its settings, the rows and profiles they stand for) and their truths:

* ``equivalence``: ``criteria.equivalence`` on ``fit.paired_alpha_difference`` (sink_shared_first_token,
  jacobian_is_finite), margin ``EQUIVALENCE_MARGIN`` 0.1; difference 0, 0.05, 0.1 (on the margin), 0.2, 0.4.
* ``near_zero``: ``criteria.near_zero`` / ``criteria.clearly_decays`` on one ``fit_power_law`` alpha
  (bias_stops_decay at each early step), whose verdicts are those of ``criteria.equivalence`` on the same interval
  (llm_bias_stops, jacobian_absent_at_init; checked on every draw); alpha 0, 0.05, 0.2, 0.6.
* ``every_above_zero``: ``criteria.every_above_zero`` over a row's differences, paired (trained_faster: 2 layers;
  deeper_remembers_longer: 6 differences over 3 seeds of 4 pairs; llm_trained_faster: 30 layers, the trained
  model's pairs split across the init seeds, 3 seeds of 4 in the quick profile, 8 of 2 in the full one); every
  layer +0.2, one layer 0 (the others +0.2), one layer -0.2, every layer 0.
* ``shape_test``: ``criteria.shape_test`` on the records of ``bound.shape_check`` (relay_logs: depths 1, 2 and 4
  pooled, 7 layers, T 512; trained_bound: depth 2, T 112), ``SLOPE_MARGIN`` 0.1 on the slope of offset / relay
  shape on [T/16, T]; every slope -0.3, every slope 0, one slope +0.3, one slope +0.6 (the others 0).
* ``rise``: ``criteria.rise`` on ``fit.local_exponent_rise`` from t = ``RISE_T_MIN`` and the relay model's rise on
  the same grid, ``experiments.exponent_rise``'s two numbers (exponent_rise: layers 2 to 4 of depth 4, T 2048;
  llm_exponent_rise: layers 2, 15, 30, T 512, 3 seeds of 4 pairs), the threshold ``RISE_MARGIN`` 0.05 on both
  sides; every layer's rise +0.2, one layer +0.05 (on the threshold), one layer 0, one layer -0.2, the first layer
  +0.2 and the others -0.2. Where the relay model does not rise by more than ``RISE_MARGIN`` (layers 15 and 30 on t
  up to 512) a network agrees there by not rising: the truths' verdicts say so.
* ``in_range``: ``criteria.in_range`` of one alpha with ``TRAINED_RANGE`` (0.55, 0.7) widened by the margin,
  (0.45, 0.8) (trained_alpha, llm_trained_alpha); alpha 0.3, 0.4, 0.45 (on the widened range's
  end), 0.5, 0.6, 0.75, 0.9. It replaced ``criteria.overlaps`` (agree whenever the interval meets the range) in
  commit 6d36235 (issue 49); the benchmark reports that rule's rates on the same draws (``overlaps_before``).
* ``at_least``: ``criteria.at_least``, non-inferiority, on one ``fit_power_law`` alpha minus the alpha of the
  dilution share P / (P + t) on the same window (llm_direct_dilution: the direct read, 4 pairs at T 512 in the quick
  profile, 16 at T 1024 in the full one); the difference -0.3, -0.15, -0.1 (on the threshold -``EQUIVALENCE_MARGIN``),
  -0.05, 0 (exactly the dilution share's pace), +0.3.
* ``beyond``: ``criteria.beyond`` of one seed's alpha against 0, below it agreeing (bias_reverses: the biased
  model's last layer at the stop, t in [32, C - P] = [32, 112]; the quick profile's one seed of 8 pairs, whose row
  ``criteria.seeds_agree`` leaves not measured for want of seeds, and the full profile's 3 seeds of 32 pairs, each
  seed its own model and interval, agreeing or disagreeing only when every seed does); alpha -0.2, -0.05, 0 (on the
  threshold), +0.05, +0.2 in every seed.

Noise: pair ``i`` of a condition is ``d_i(t) = f(t) exp(a_i - b_i log(t / t0) + e_i(t))``, ``t0 = 100``, with
``a_i ~ N(0, 0.22)`` (SmolLM2's level spread at t0), ``b_i ~ N(0, 0.28 * 0.6)`` (SmolLM2's sd of log alpha over
pairs, 0.28, at its alpha 0.6; additive here, so that a flat or nearly flat truth keeps the spread of exponents a
trained model's pairs have: the power-law calibration's multiplicative spread would give alpha = 0 none and make
the near-zero judges look better than they are) and ``e_i(t) ~ N(0, 0.04)`` independent per position. Over seeds
(``seeds`` > 1) each seed adds a level and an exponent effect of the same sizes to all its pairs (as
tests/test_coverage.py). Paired conditions: every effect of a pair under the second condition is ``SHARE`` (0.95,
as tests/test_coverage.py) times its effect under the first plus ``sqrt(1 - SHARE^2)`` times a fresh draw. The
layers of a row are independent. One setting of the rise uses the small untrained models' own
exponent spread, ``UNTRAINED_EXPONENT_SD`` 0.02, the models exponent_rise is measured on.

The truth. A verdict is about the population of pairs, whose mean curve each fit estimates; with exponents that
differ between pairs that mean is ``f(t) exp(s^2 log(t / t0)^2 / 2)`` up to a constant (``s^2`` the variance of a
pair's, and its seed's, exponent effect): mixing exponents bends it. Every truth above is the *population* value:
the definition applied to that curve by the project's own code without an interval (``fit_power_law``,
``local_exponent_rise`` of one curve), the curves' own exponent set to give it (``own_alpha``, ``own_slope``,
``rise_coefficient``; each cell checks it to 1e-9, ``truth_check``). Paired sides bend alike. The rise is of the
geometric-mean curve, which does not bend (the pairs' effects are 0 on average in log). A truth exactly on a
threshold is on the boundary: the definition's strict inequalities make neither verdict true there, so "not
measured" is right and each decisive verdict is the interval's one-sided error (nominal 2.5 %), each held to
``WRONG_MAX``.

Distance from the threshold, in noise standard errors: the standard error (SE) of the judged statistic is its
standard deviation over the draws (pooled over a row's layers, which share a law); a truth on the agree side is as
far as its nearest layer (or band end), one on the disagree side as far as its farthest layer beyond.

Requirements (per cell, over the draws): wrong verdicts at most ``WRONG_MAX`` (5 %) everywhere. The issue's "not
measured at most 10 % beyond one noise standard error" is reported (the benchmark), not required: a 95 %
interval whose truth lies ``z`` SE from its threshold decides about ``P(T'(nu, z) > q)`` of the time (noncentral
t, ``q`` the t quantile, ``nu`` the interval's degrees of freedom, ``decides``): 90 % only from ``z`` = 3.24 SE
(known standard error) to 3.80 (7 degrees of freedom) and 6.80 (2), farther with a Bonferroni quantile or several
layers that must all hold (``decisive_distance``). So where the truth lies at least ``DECISIVE_MIN`` (3.5) SE from
its threshold and as far as that theory needs (``Cell.required_distance``), the judge must give the truth's
verdict at least 90 % of the time.

The test runs every cell (but ``BENCHMARK_ONLY``'s) at ``TEST_DRAWS`` (30) draws of ``TEST_BOOT`` (50) bootstrap
resamples each, a rate held with binomial slack (``allowed``): a cell fails when its count reaches the first ``k``
with ``P(X >= k) < 0.01`` at the nominal rate (5 % wrong: k = 6, so at most 5 of 30; 10 % undecided: k = 8, at
most 7 of 30). ``benchmarks/judge_calibration.py`` writes the full table (``BENCH_DRAWS`` 200 draws of ``N_BOOT``
200 resamples; the claims use 1000) with the measured and theoretical distances at which each judge decides 90 %
of the time to docs/judge_calibration.md. Cells whose wrong verdicts break the requirement there beyond binomial
noise are listed in ``KNOWN_WRONG`` with their rates and held to it under ``xfail(strict=True)``
(``test_known_wrong_cells``): findings about the judges; no judge was loosened and nothing was tuned to pass.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable

import numpy as np
import pytest
from scipy.stats import binom, nct
from scipy.stats import t as student_t

from nohair_jax import criteria
from nohair_jax.claims import NOT_MEASURED
from nohair_jax.fit import (
    fit_power_law, local_exponent, local_exponent_rise, paired_alpha_difference, quarter_rise,
)

T0 = 100.0  # where the pairs' levels were measured: their curves fan out around it
ALPHA_REF = 0.6  # SmolLM2's alpha, at which its sd of log alpha over pairs (0.28) was measured
EXPONENT_SD, LOG_LEVEL_SD, POSITION_SD = 0.28 * ALPHA_REF, 0.22, 0.04
UNTRAINED_EXPONENT_SD = 0.02  # the small untrained models' own exponent spread (tests/test_coverage.py)
SHARE = 0.95  # paired conditions: how much of a pair's effects is the same under both (tests/test_coverage.py)
N_BOOT, TEST_BOOT = 200, 50  # resamples per draw: the benchmark's and the test's (the claims': 1000)
TEST_DRAWS, BENCH_DRAWS = 30, 200
WRONG_MAX, UNDECIDED_MAX, DECISIVE = 0.05, 0.10, 0.90
DECISIVE_MIN = 3.5  # the test requires a decision only this many SE from the threshold (and as far as theory needs)
CONFIDENCE = 0.95
AGREE, DISAGREE, BOUNDARY = "agree", "disagree", "boundary"
BANDS = ("equivalence", "near_zero", "in_range")  # judges of one interval against a band (lo, hi): inside agrees
UNANIMOUS = ("beyond",)  # judges over layers (seeds) that agree, and disagree, only when every one does


# ---------------------------------------------------------------- noise and the population curve


def pair_effects(rng: np.random.Generator, n_pairs: int, x: np.ndarray, seeds: int = 1,
                 exponent_sd: float = EXPONENT_SD) -> np.ndarray:
    """``log d_i(t) - log f(t)`` of ``n_pairs`` pairs at ``x = log(t / t0)``: ``[n_pairs, len(x)]`` (the noise model,
    module docstring); over ``seeds`` > 1, consecutive blocks of ``n_pairs / seeds`` pairs share a seed's effects."""
    level = rng.normal(0, LOG_LEVEL_SD, (n_pairs, 1))
    exponent = rng.normal(0, exponent_sd, (n_pairs, 1))
    if seeds > 1:
        level = level + np.repeat(rng.normal(0, LOG_LEVEL_SD, (seeds, 1)), n_pairs // seeds, axis=0)
        exponent = exponent + np.repeat(rng.normal(0, exponent_sd, (seeds, 1)), n_pairs // seeds, axis=0)
    return level - exponent * x + rng.normal(0, POSITION_SD, (n_pairs, x.size))


def paired_effects(rng: np.random.Generator, n_pairs: int, x: np.ndarray, seeds: int = 1,
                   exponent_sd: float = EXPONENT_SD) -> tuple[np.ndarray, np.ndarray]:
    """The same pairs under two conditions: (first, second), the second ``SHARE`` times the first plus
    ``sqrt(1 - SHARE^2)`` times fresh effects (both with ``pair_effects``' law)."""
    own, fresh = (pair_effects(rng, n_pairs, x, seeds, exponent_sd) for _ in range(2))
    return own, SHARE * own + np.sqrt(1 - SHARE**2) * fresh


def bend(x: np.ndarray, seeds: int = 1, exponent_sd: float = EXPONENT_SD) -> np.ndarray:
    """``log`` of the population mean curve minus ``log f``, up to a constant: ``s^2 x^2 / 2``, ``s^2`` the variance
    of a pair's exponent effect (over seeds: the pair's and its seed's)."""
    return exponent_sd**2 * (2 if seeds > 1 else 1) * x**2 / 2


def population_alpha(t: np.ndarray, t_min: int, alpha: float, seeds: int = 1, exponent_sd: float = EXPONENT_SD) -> float:
    """alpha of the population mean curve of pairs whose own curve is ``t^-alpha``: the definition (``fit_power_law``
    on the window from ``t_min``, no interval) applied to it."""
    x = np.log(t / T0)
    return fit_power_law(t, np.exp(-alpha * x + bend(x, seeds, exponent_sd)), t_min=t_min, n_boot=0).alpha


def own_alpha(t: np.ndarray, t_min: int, target: float, seeds: int = 1, exponent_sd: float = EXPONENT_SD) -> float:
    """The pairs' own exponent whose population alpha is ``target`` (the fit is linear in log d)."""
    return target - population_alpha(t, t_min, 0.0, seeds, exponent_sd)


def _rise_shape(t: np.ndarray) -> np.ndarray:
    """``log`` of a curve whose local exponent rises (as the relay model's ``(log t)^k / t`` does): ``log log(t + 1)``."""
    return np.log(np.log(t + 1))


def _rise_of(t: np.ndarray, log_curve: np.ndarray) -> float:
    return local_exponent_rise(t, np.exp(log_curve), t_min=criteria.RISE_T_MIN).rise


def rise_coefficient(t: np.ndarray, target: float) -> float:
    """``c`` such that the population geometric-mean curve of pairs whose own curve is ``t^-0.6 (log(t + 1))^c``
    (their effects are 0 on average in log) rises by ``target`` (``local_exponent_rise`` from ``RISE_T_MIN``; the
    rise is linear in log d and 0 for a power law)."""
    return target / _rise_of(t, _rise_shape(t))


# ---------------------------------------------------------------- settings, truths, judges


@dataclasses.dataclass(frozen=True)
class Setting:
    """Where a judge is calibrated: the rows it stands for, the window ``[t_min, t_max]``, the pairs per condition
    (over ``seeds`` > 1: the interval resamples seeds, then pairs), the layers the verdict reads; the relay model's depths or layers and P (shape test, rise); the
    pairs' exponent spread."""

    judge: str
    rows: str
    pairs: int
    t_min: int
    t_max: int
    seeds: int = 1
    layers: int = 1
    depths: tuple[int, ...] = ()
    rise_layers: tuple[int, ...] = ()
    prompt_len: int = 16
    exponent_sd: float = EXPONENT_SD

    @property
    def name(self) -> str:
        def count(pairs: int, seeds: int) -> str:
            return f"{seeds} seeds x {pairs // seeds}" if seeds > 1 else f"{pairs}"

        pairs = count(self.pairs, self.seeds)
        spread = "" if self.exponent_sd == EXPONENT_SD else f", exponent sd {self.exponent_sd:g}"
        return f"{self.rows}: t in [{self.t_min}, {self.t_max}], {pairs} pairs{spread}"

    @property
    def groups(self) -> np.ndarray | None:
        return np.repeat(np.arange(self.seeds), self.pairs // self.seeds) if self.seeds > 1 else None

    def positions(self) -> np.ndarray:
        """The positions the curves are drawn at: the window (the shape test: 1..T, as ``shape_check`` requires)."""
        return np.arange(1 if self.judge == "shape_test" else self.t_min, self.t_max + 1, dtype=np.float64)


@dataclasses.dataclass(frozen=True)
class Truth:
    """A truth: its label, the judged statistic's population value per layer, the definition's verdict on it."""

    label: str
    values: tuple[float, ...]
    verdict: str


@dataclasses.dataclass(frozen=True)
class Judge:
    """One shared criterion: how a draw is simulated and judged, and where.

    ``simulate(setting, truths, rng, n_boot, draw)`` returns, per truth, the draw's records (one per layer: the
    results of the fit or difference function the row calls, on the same noise for every truth); ``verdict(setting,
    records)`` applies the criterion to them; ``statistic`` and ``interval`` name a record's estimate and interval
    (moved together by ``shift``: the fits are equivariant, curves times ``t^-c`` move alpha and its interval by
    ``c``); ``threshold``: where the verdict turns (a margin's two ends, the range's ends, or the one value twice)."""

    simulate: Callable
    verdict: Callable
    statistic: str
    interval: str
    threshold: tuple[float, float]
    values: tuple
    settings: tuple[Setting, ...]
    rule: str


def _layer_orientation(s: Setting) -> tuple[float, np.ndarray, np.ndarray, bool]:
    """For the judges over layers: (margin, per layer the sign of the agree side, per layer whether it can agree,
    whether a value on the margin agrees). "Above zero": above 0; the shape test: at or below ``SLOPE_MARGIN``; the
    rise: on the relay model's side of ``RISE_MARGIN`` (above where it rises by more, below where it does not)."""
    if s.judge == "shape_test":
        return criteria.SLOPE_MARGIN, -np.ones(s.layers), np.ones(s.layers, bool), True
    if s.judge == "rise":
        rises = np.array(relay_rises(s.prompt_len, s.t_min, s.t_max, s.rise_layers)) > criteria.RISE_MARGIN
        return criteria.RISE_MARGIN, np.where(rises, 1.0, -1.0), np.ones(s.layers, bool), False
    if s.judge == "at_least":  # llm_direct_dilution: the difference above -margin agrees
        return -criteria.EQUIVALENCE_MARGIN, np.ones(s.layers), np.ones(s.layers, bool), False
    if s.judge == "beyond":  # bias_reverses: alpha below 0 agrees
        return 0.0, -np.ones(s.layers), np.ones(s.layers, bool), False
    return 0.0, np.ones(s.layers), np.ones(s.layers, bool), False


def layer_gaps(s: Setting, values) -> np.ndarray:
    """Each layer's value from the margin, positive on its agree side."""
    margin, sign, _, _ = _layer_orientation(s)
    return sign * (np.asarray(values, dtype=np.float64) - margin)


def noiseless_verdict(s: Setting, values) -> str:
    """The definition applied to the population values (no interval): agree, disagree, or on the boundary."""
    judge = JUDGES[s.judge]
    v = np.asarray(values, dtype=np.float64)
    lo, hi = judge.threshold
    if s.judge in BANDS:  # a truth on an end (to rounding: 0.55 - 0.1 is 0.45000000000000007) is on the boundary
        if min(abs(v[0] - lo), abs(v[0] - hi)) < 1e-12:
            return BOUNDARY
        return AGREE if lo < v[0] < hi else DISAGREE
    gaps = layer_gaps(s, v)
    _, _, possible, at_margin = _layer_orientation(s)
    if possible.all() and ((gaps > 0).all() or (at_margin and (gaps >= 0).all())):
        return AGREE
    if s.judge in UNANIMOUS:
        return DISAGREE if (gaps < 0).all() else BOUNDARY
    return DISAGREE if (gaps < 0).any() else BOUNDARY


def truths_of(s: Setting) -> tuple[Truth, ...]:
    """A setting's truths: its judge's values (per layer where they are layer patterns), with their verdicts."""
    judge = JUDGES[s.judge]
    truths = []
    for value in judge.values:
        if isinstance(value, tuple):  # (label, pattern): a layer pattern, the first value in the first layer
            label, (first, rest) = value
            values = (first, *(rest,) * (s.layers - 1))
        else:
            label, values = f"{value:+g}" if s.judge != "in_range" else f"{value:g}", (value,)
        truths.append(Truth(label, tuple(float(v) for v in values), noiseless_verdict(s, values)))
    return tuple(truths)


# -- equivalence on a paired difference


def _simulate_equivalence(s: Setting, truths, rng, n_boot: int, draw: int):
    t = s.positions()
    x = np.log(t / T0)
    first, second = paired_effects(rng, s.pairs, x, exponent_sd=s.exponent_sd)
    d_b = np.exp(second - ALPHA_REF * x)
    return [[paired_alpha_difference(t, np.exp(first - (ALPHA_REF + truth.values[0]) * x), d_b, t_min=s.t_min,
                                     n_boot=n_boot, seed=draw)] for truth in truths]


def _verdict_equivalence(s: Setting, records) -> str:
    (diff,) = records  # the rows judge the interval rounded to 3 decimals (sinks, real_model)
    return criteria.equivalence("", [round(v, 3) for v in diff.ci]).verdict


# -- one alpha: against the equivalence margin, or the paper's range


def _simulate_alpha(s: Setting, truths, rng, n_boot: int, draw: int):
    t = s.positions()
    x = np.log(t / T0)
    effects = pair_effects(rng, s.pairs, x, s.seeds, s.exponent_sd)
    return [[fit_power_law(t, np.exp(effects - own_alpha(t, s.t_min, truth.values[0], s.seeds, s.exponent_sd) * x),
                           t_min=s.t_min, groups=s.groups, n_boot=n_boot, seed=draw)] for truth in truths]


def _verdict_near_zero(s: Setting, records) -> str:
    """``criteria.equivalence`` on alpha's interval (llm_bias_stops, jacobian_absent_at_init); ``near_zero`` and
    ``clearly_decays`` (bias_stops_decay, dilution_necessary_check) must say the same: near_zero is its agree,
    clearly_decays its disagree above the margin."""
    (fit,) = records
    verdict = criteria.equivalence("", criteria.alpha_interval(fit)).verdict
    above = criteria.alpha_interval(fit)[0] > criteria.EQUIVALENCE_MARGIN
    if criteria.near_zero(fit) != (verdict == AGREE) or criteria.clearly_decays(fit) != (verdict == DISAGREE and above):
        raise AssertionError(f"near_zero / clearly_decays differ from equivalence on {fit.ci}")
    return verdict


def _verdict_in_range(s: Setting, records) -> str:
    (fit,) = records
    return criteria.decided("", criteria.alpha_interval(fit), criteria.in_range(fit, *criteria.TRAINED_RANGE)).verdict


def overlaps_before(fit) -> str:
    """The range rule these rows used before ``criteria.in_range`` (``criteria.overlaps`` before commit 6d36235,
    verbatim but for its name): agree when alpha's interval meets the range, disagree when it lies wholly outside;
    the benchmark reports its error rates on the same draws."""
    lo, hi = criteria.TRAINED_RANGE
    ci = criteria.alpha_interval(fit) or [fit.alpha, fit.alpha]
    return AGREE if ci[1] >= lo and ci[0] <= hi else DISAGREE


# -- every layer above zero


def _simulate_every(s: Setting, truths, rng, n_boot: int, draw: int):
    """Per layer its own pairs' curves, the same for every truth: one ``paired_alpha_difference`` over the same
    pairs (and seeds), the first side's exponent the second's plus the truth."""
    t = s.positions()
    x = np.log(t / T0)
    records, fitted = [[] for _ in truths], {}
    for layer in range(s.layers):
        first, second = paired_effects(rng, s.pairs, x, s.seeds, s.exponent_sd)
        d_b = np.exp(second - ALPHA_REF * x)
        for k, truth in enumerate(truths):
            delta = truth.values[layer]
            if delta not in fitted:  # the same curves at the same truth: one fit
                d_a = np.exp(first - (ALPHA_REF + delta) * x)
                fitted[delta] = paired_alpha_difference(t, d_a, d_b, t_min=s.t_min, groups=s.groups, n_boot=n_boot,
                                                        seed=draw + 7919 * layer)
            records[k].append(fitted[delta])
        fitted.clear()
    return records


def _verdict_every(s: Setting, records) -> str:
    return criteria.every_above_zero(records)[0]


# -- the relay-shape test


@functools.lru_cache(maxsize=None)
def _relay_shape(prompt_len: int, length: int, depth: int) -> np.ndarray:
    from nohair_jax import relay

    return np.asarray(relay.offsets(prompt_len, length, depth), dtype=np.float64)


def shape_window(s: Setting) -> int:
    return max(2, s.t_max // 16)  # bound.shape_check's window, [max(2, T // 16), T]


def own_slope(s: Setting, target: float) -> float:
    """The pairs' own slope of offset / relay shape whose population slope on ``shape_check``'s window is ``target``."""
    t = s.positions()[shape_window(s) - 1:]
    return target + population_alpha(t, shape_window(s), 0.0, 1, s.exponent_sd)


def _simulate_shape(s: Setting, truths, rng, n_boot: int, draw: int):
    """Offsets ``relay shape * pair curves`` (the pairs' own slope against the shape set by the truth) of models of
    ``s.depths``, their layers pooled in order, through ``bound.shape_check``; every truth on the same draws."""
    from nohair_jax.bound import shape_check

    t = s.positions()
    x = np.log(t / T0)
    effects = [[pair_effects(rng, s.pairs, x, 1, s.exponent_sd) for _ in range(depth)] for depth in s.depths]
    records = []
    for truth in truths:
        slopes, entries = iter(truth.values), []
        for depth, layers in zip(s.depths, effects):
            shape = _relay_shape(s.prompt_len, s.t_max, depth)
            l2 = np.ones((s.pairs, depth + 1, s.t_max))
            for layer, e in enumerate(layers, start=1):
                l2[:, layer] = shape[layer] * np.exp(e + own_slope(s, next(slopes)) * x)
            entries += shape_check(t, l2, s.prompt_len, n_boot=n_boot, seed=draw)
        records.append(entries)
    return records


def _verdict_shape(s: Setting, records) -> str:
    return criteria.shape_test([e.to_dict() for e in records])[2]


# -- the rise of the local exponent


@functools.lru_cache(maxsize=None)
def relay_rises(prompt_len: int, t_min: int, t_max: int, layers: tuple[int, ...]) -> tuple[float, ...]:
    """The relay model's rise at each layer on the network's grid of t (``experiments.exponent_rise``'s)."""
    from nohair_jax import relay

    t = np.arange(t_min, t_max + 1, dtype=np.float64)
    t_grid, _ = local_exponent(t, 1 / t, t_min=criteria.RISE_T_MIN)
    return tuple(float(quarter_rise(np.asarray(relay.local_exponent(prompt_len, t_grid, layer)))) for layer in layers)


def _simulate_rise(s: Setting, truths, rng, n_boot: int, draw: int):
    t = s.positions()
    x = np.log(t / T0)
    records, fitted = [[] for _ in truths], {}
    for layer in range(s.layers):
        effects = pair_effects(rng, s.pairs, x, s.seeds, s.exponent_sd)
        for k, truth in enumerate(truths):
            target = truth.values[layer]
            if target not in fitted:
                c = rise_coefficient(t, target)
                fitted[target] = local_exponent_rise(t, np.exp(effects - ALPHA_REF * np.log(t) + c * _rise_shape(t)),
                                                     t_min=criteria.RISE_T_MIN, groups=s.groups)
            records[k].append(fitted[target])
        fitted.clear()
    return records


def _verdict_rise(s: Setting, records) -> str:
    relay = relay_rises(s.prompt_len, s.t_min, s.t_max, s.rise_layers)
    return criteria.rise([dict(layer=layer, rise=r.to_dict(), relay_rise=q)
                          for layer, r, q in zip(s.rise_layers, records, relay)]).verdict


# -- a bound: alpha at least the bound's, by non-inferiority


def _simulate_at_least(s: Setting, truths, rng, n_boot: int, draw: int):
    """The direct read's curves, their population alpha the dilution share's on the window (``dilution_alpha``) plus
    the truth; each record the fit moved by that share's alpha: the row's difference and its interval."""
    t = s.positions()
    x = np.log(t / T0)
    reference = criteria.dilution_alpha(s.prompt_len, [s.t_min, s.t_max])
    effects = pair_effects(rng, s.pairs, x, s.seeds, s.exponent_sd)
    return [[shift(fit_power_law(t, np.exp(effects - own_alpha(t, s.t_min, reference + truth.values[0], s.seeds,
                                                                s.exponent_sd) * x),
                                 t_min=s.t_min, groups=s.groups, n_boot=n_boot, seed=draw), -reference)]
            for truth in truths]


def _verdict_at_least(s: Setting, records) -> str:
    (difference,) = records  # rounded to 3 decimals, as the row does
    return criteria.at_least("", [round(v, 3) for v in difference.ci]).verdict


# -- a directional statement on one alpha per seed


def _simulate_beyond(s: Setting, truths, rng, n_boot: int, draw: int):
    """Per seed (``s.layers``: each seed its own trained model) its own pairs' curves, the same for every truth,
    through ``fit_power_law`` on the row's window; the pairs' own exponent set so that the population alpha is the
    truth."""
    t = s.positions()
    x = np.log(t / T0)
    records = [[] for _ in truths]
    for seed in range(s.layers):
        effects = pair_effects(rng, s.pairs, x, 1, s.exponent_sd)
        for k, truth in enumerate(truths):
            records[k].append(fit_power_law(t, np.exp(effects - own_alpha(t, s.t_min, truth.values[seed], 1,
                                                                             s.exponent_sd) * x),
                                            t_min=s.t_min, n_boot=n_boot, seed=draw + 7919 * seed))
    return records


def _verdict_beyond(s: Setting, records) -> str:
    """bias_reverses' judgement: ``criteria.beyond`` of each seed's alpha interval against 0 (below agrees), the
    seeds' verdicts through ``criteria.seeds_agree`` with runs that count as trained (one seed: its own verdict,
    which the row's ``seeds_agree`` leaves not measured for want of seeds)."""
    judged = [criteria.decided("", criteria.alpha_interval(f), criteria.beyond(criteria.alpha_interval(f), 0.0,
                                                                               above=False)) for f in records]
    if len(judged) == 1:
        return judged[0].verdict
    levelled = dict(drop=0.0, upper=0.0, step=1, reason="")  # a stand-in that counts as trained
    runs = [dict(seed=k, plateau=levelled) for k in range(len(judged))]
    return criteria.seeds_agree(list(range(len(judged))), judged, runs).verdict


# Layer patterns: (label, (the first layer's value, every other layer's)).
_EVERY = (("every layer +0.2", (0.2, 0.2)), ("one layer 0", (0.0, 0.2)), ("one layer -0.2", (-0.2, 0.2)),
          ("every layer 0", (0.0, 0.0)))
_RISE_T = dict(t_min=criteria.RISE_T_MIN, t_max=2048, layers=3, rise_layers=(2, 3, 4))

JUDGES: dict[str, Judge] = {
    "equivalence": Judge(
        _simulate_equivalence, _verdict_equivalence, "difference", "ci",
        (-criteria.EQUIVALENCE_MARGIN, criteria.EQUIVALENCE_MARGIN), (0.0, 0.05, 0.1, 0.2, 0.4),
        (Setting("equivalence", "sink_shared_first_token (quick)", 8, 16, 256),
         Setting("equivalence", "jacobian_is_finite", 8, 32, 512),
         Setting("equivalence", "(between the profiles)", 16, 32, 512),
         Setting("equivalence", "sink_shared_first_token (full)", 32, 32, 1024)),
        "`criteria.equivalence` on `fit.paired_alpha_difference` (its interval rounded to 3 decimals, as the rows "
        "do): agree when the interval lies inside (-0.1, 0.1), disagree when it lies wholly outside, otherwise not "
        "measured"),
    "near_zero": Judge(
        _simulate_alpha, _verdict_near_zero, "alpha", "ci",
        (-criteria.EQUIVALENCE_MARGIN, criteria.EQUIVALENCE_MARGIN), (0.0, 0.05, 0.2, 0.6),
        (Setting("near_zero", "bias_stops_decay (quick), per step", 8, 32, 112),
         Setting("near_zero", "(between the profiles)", 16, 32, 112),
         Setting("near_zero", "bias_stops_decay (full), per step", 32, 32, 112),
         Setting("near_zero", "llm_bias_stops", 8, 32, 512),
         Setting("near_zero", "jacobian_absent_at_init", 12, 32, 512, seeds=3)),
        "`criteria.near_zero` (agree: alpha's interval inside (-0.1, 0.1)) and `criteria.clearly_decays` (its "
        "interval above 0.1) on one `fit_power_law` alpha: the verdicts of `criteria.equivalence` on that interval "
        "(checked on every draw), not measured where neither holds"),
    "every_above_zero": Judge(
        _simulate_every, _verdict_every, "difference", "ci", (0.0, 0.0), _EVERY,
        (Setting("every_above_zero", "trained_faster (quick), paired", 8, 32, 112, layers=2),
         Setting("every_above_zero", "(between the profiles), paired", 16, 32, 112, layers=2),
         Setting("every_above_zero", "trained_faster (full), paired", 32, 32, 112, layers=2),
         Setting("every_above_zero", "deeper_remembers_longer, paired", 12, 32, 512, seeds=3, layers=6),
         Setting("every_above_zero", "llm_trained_faster (quick), paired", 12, 32, 512, seeds=3, layers=30),
         Setting("every_above_zero", "llm_trained_faster (full), paired", 16, 32, 1024, seeds=8, layers=30)),
        "`criteria.every_above_zero`: agree when every layer's 95 % interval lies above 0, disagree when some "
        "layer's interval widened for the number of layers (Bonferroni) lies below 0, otherwise not measured"),
    "shape_test": Judge(
        _simulate_shape, _verdict_shape, "slope", "interval", (criteria.SLOPE_MARGIN, criteria.SLOPE_MARGIN),
        (("every slope -0.3", (-0.3, -0.3)), ("every slope 0", (0.0, 0.0)), ("one slope +0.3", (0.3, 0.0)),
         ("one slope +0.6", (0.6, 0.0))),
        (Setting("shape_test", "relay_logs (quick): depths 1, 2, 4", 8, 32, 512, layers=7, depths=(1, 2, 4)),
         Setting("shape_test", "(between the profiles): depths 1, 2, 4", 16, 32, 512, layers=7, depths=(1, 2, 4)),
         Setting("shape_test", "trained_bound (quick): depth 2", 8, 7, 112, layers=2, depths=(2,)),
         Setting("shape_test", "trained_bound (full): depth 2", 32, 7, 112, layers=2, depths=(2,))),
        "`criteria.shape_test` on the records of `bound.shape_check` (the log-log slope of offset / relay shape on "
        "[T/16, T]): agree when every layer's slope interval ends at or below 0.1, disagree when some layer's "
        "interval widened for the number of layers starts above it, otherwise not measured"),
    "rise": Judge(
        _simulate_rise, _verdict_rise, "rise", "ci", (criteria.RISE_MARGIN, criteria.RISE_MARGIN),
        (_EVERY[0], (f"one layer +{criteria.RISE_MARGIN:g}", (criteria.RISE_MARGIN, 0.2)), *_EVERY[1:3],
         ("one layer +0.2, the others -0.2", (0.2, -0.2))),
        (Setting("rise", "exponent_rise (quick): layers 2-4", 4, **_RISE_T),
         Setting("rise", "exponent_rise (full pairs, quick T): layers 2-4", 16, **_RISE_T),
         Setting("rise", "exponent_rise (quick): layers 2-4", 4, **_RISE_T, exponent_sd=UNTRAINED_EXPONENT_SD),
         Setting("rise", "llm_exponent_rise: layers 2, 15, 30", 12, criteria.RISE_T_MIN, 512, seeds=3, layers=3,
                 rise_layers=(2, 15, 30))),
        "`criteria.rise` on `fit.local_exponent_rise` (the geometric-mean curve's rise, a t-interval over the pairs' "
        f"own rises) from t = {criteria.RISE_T_MIN} and the relay model's rise on the same grid, a curve rising where "
        f"its rise exceeds {criteria.RISE_MARGIN:g}: agree when in every layer the network's interval lies wholly on "
        f"the relay model's side of {criteria.RISE_MARGIN:g}, disagree when in some layer it lies, widened for the "
        "number of layers, wholly on the other side, otherwise not measured"),
    "in_range": Judge(
        _simulate_alpha, _verdict_in_range, "alpha", "ci",
        (criteria.TRAINED_RANGE[0] - criteria.EQUIVALENCE_MARGIN, criteria.TRAINED_RANGE[1] + criteria.EQUIVALENCE_MARGIN),
        (0.3, 0.4, 0.45, 0.5, 0.6, 0.75, 0.9),
        (Setting("in_range", "trained_alpha (quick)", 8, 32, 112),
         Setting("in_range", "(between the profiles)", 16, 32, 112),
         Setting("in_range", "trained_alpha (full)", 32, 32, 112),
         Setting("in_range", "llm_trained_alpha", 16, 32, 512)),
        "`criteria.in_range` with `TRAINED_RANGE` (0.55, 0.7): agree when alpha's interval lies inside the range "
        "widened by the equivalence margin, (0.45, 0.8), disagree when it lies wholly outside that, otherwise not "
        "measured (it replaced `criteria.overlaps`, which agreed whenever the interval met the range, in commit "
        "6d36235)"),
    "at_least": Judge(
        _simulate_at_least, _verdict_at_least, "alpha", "ci",
        (-criteria.EQUIVALENCE_MARGIN, -criteria.EQUIVALENCE_MARGIN), (-0.3, -0.15, -0.1, -0.05, 0.0, 0.3),
        (Setting("at_least", "llm_direct_dilution (quick)", 4, 32, 512),
         Setting("at_least", "llm_direct_dilution (full)", 16, 32, 1024)),
        "`criteria.at_least` on one `fit_power_law` alpha minus the alpha of P / (P + t) on the same window (P 16; "
        "its interval rounded to 3 decimals, as the row does): agree when the difference's interval lies above "
        f"-{criteria.EQUIVALENCE_MARGIN:g}, disagree when it lies wholly below, otherwise not measured"),
    "beyond": Judge(
        _simulate_beyond, _verdict_beyond, "alpha", "ci", (0.0, 0.0),
        tuple((f"every seed {v:+g}" if v else "every seed 0", (v, v)) for v in (-0.2, -0.05, 0.0, 0.05, 0.2)),
        (Setting("beyond", "bias_reverses (quick), the one seed", 8, 32, 112),
         Setting("beyond", "bias_reverses (full), 3 seeds", 32, 32, 112, layers=3)),
        "`criteria.beyond` of alpha's interval against 0, `above=False` (bias_reverses: the biased model's last layer "
        "at the stop): a seed agrees when its interval lies wholly below 0, disagrees when it lies wholly above, "
        "otherwise not measured; the row (`criteria.seeds_agree`) agrees or disagrees only when every one of its 3 "
        "trained seeds does"),
}


# ---------------------------------------------------------------- the theory: how often an interval decides


def decides(z, dof: float, statements: int = 1):
    """How often a 95 % t-interval (Bonferroni over ``statements``) excludes a threshold its truth lies ``z`` SE
    beyond, its standard error estimated with ``dof`` degrees of freedom: ``P(T'(dof, z) > q)``, noncentral t."""
    q = student_t.ppf(1 - (1 - CONFIDENCE) / (2 * statements), dof)
    return nct.sf(q, dof, np.asarray(z, dtype=np.float64))


def decisive_distance(dof: float, statements: int = 1, layers: int = 1, rate: float = DECISIVE) -> float:
    """The distance (SE) at which the judge decides ``rate`` of the time: one interval (``statements`` > 1: widened by
    Bonferroni), or ``layers`` intervals that must all exclude the threshold, every truth that far."""
    from scipy.optimize import brentq

    return float(brentq(lambda z: decides(z, dof, statements) ** layers - rate, 0.0, 60.0))


def theory_distance(s: Setting, side: str, dof: float) -> float | None:
    """The theory's 90 % distance for ``side`` (agree, disagree) of setting ``s`` (a band: from its nearer end, the
    other far); None where that side cannot be reached (a rise row whose relay model does not rise everywhere
    cannot agree)."""
    if s.judge in UNANIMOUS and s.layers > 1:
        return decisive_distance(dof, layers=s.layers)
    if s.judge in ("every_above_zero", "shape_test", "rise") and s.layers > 1:
        if side == AGREE:
            return decisive_distance(dof, layers=s.layers) if _layer_orientation(s)[2].all() else None
        return decisive_distance(dof, statements=s.layers)
    return decisive_distance(dof)


def _distance(s: Setting, truth: Truth, se: float) -> float:
    """How far the truth lies from where the verdict turns, in SE (module docstring); 0 on a boundary."""
    lo, hi = JUDGES[s.judge].threshold
    v = np.asarray(truth.values)
    if truth.verdict == BOUNDARY:
        return 0.0
    if s.judge in BANDS:
        return float((min(v[0] - lo, hi - v[0]) if truth.verdict == AGREE else max(lo - v[0], v[0] - hi)) / se)
    gaps = layer_gaps(s, v) / se
    return float(gaps.min() if truth.verdict == AGREE else (-gaps).max())


def _theory(s: Setting, truth: Truth, se: float, dof: float) -> float | None:
    """The share of the draws with the truth's verdict that the noncentral t predicts; None on a boundary."""
    lo, hi = JUDGES[s.judge].threshold
    v = np.asarray(truth.values)
    if truth.verdict == BOUNDARY:
        return None
    if s.judge in BANDS:
        if truth.verdict == DISAGREE:
            return float(decides(max(lo - v[0], v[0] - hi) / se, dof))
        return float(max(0.0, decides((hi - v[0]) / se, dof) + decides((v[0] - lo) / se, dof) - 1))
    gaps = layer_gaps(s, v) / se
    if truth.verdict == AGREE:
        return float(np.prod(decides(gaps, dof)))
    if s.judge in UNANIMOUS:
        return float(np.prod(decides(-gaps, dof)))
    return float(1 - np.prod(1 - decides(-gaps[gaps < 0], dof, statements=s.layers)))


# ---------------------------------------------------------------- one setting, every truth


@dataclasses.dataclass
class Cell:
    """One row of the table: setting ``setting`` at truth ``truth`` over ``draws`` draws of ``n_boot`` resamples.

    truth_check: the largest |definition on the population curve - stated truth| over the layers; se: the judged
    statistic's standard deviation over the draws (pooled over layers); se_ratio: the intervals' mean standard
    error (half-width / q) over ``se``; coverage: the share of the intervals (every layer) holding the truth;
    distance: from the threshold in SE; agree, disagree, undecided: the verdicts' shares; theory: the share with the
    truth's verdict the noncentral t predicts (None on a boundary)."""

    setting: Setting
    truth: Truth
    draws: int
    n_boot: int
    truth_check: float
    se: float
    se_ratio: float
    coverage: float
    dof: float
    distance: float
    agree: float
    disagree: float
    undecided: float
    theory: float | None
    records: list = dataclasses.field(repr=False, default_factory=list)

    @property
    def wrong(self) -> float:
        """Wrong verdicts: the opposite one, or on a boundary either decisive one."""
        return {AGREE: self.disagree, DISAGREE: self.agree, BOUNDARY: self.agree + self.disagree}[self.truth.verdict]

    @property
    def decided(self) -> float:
        """The share with the truth's own verdict (on a boundary: not measured)."""
        return {AGREE: self.agree, DISAGREE: self.disagree, BOUNDARY: self.undecided}[self.truth.verdict]

    def required_distance(self) -> float | None:
        """How far the truth must lie for the test to require a decision: ``DECISIVE_MIN`` and the theory's 90 %
        distance; None where no decision is required (a boundary, or a side ``theory_distance`` leaves out)."""
        if self.truth.verdict == BOUNDARY:
            return None
        theory = theory_distance(self.setting, self.truth.verdict, self.dof)
        return None if theory is None else max(DECISIVE_MIN, theory)


def truth_check(s: Setting, truth: Truth) -> float:
    """|the definition applied to the population curve - the stated truth|, largest over the layers: the truths are
    population values by construction (``own_alpha``, ``own_slope``, ``rise_coefficient``); this recomputes them."""
    t, sd = s.positions(), s.exponent_sd
    x = np.log(t / T0)

    def alpha(own: float, seeds: int = 1) -> float:  # the definition on the population curve of own exponent ``own``
        return fit_power_law(t, np.exp(-own * x + bend(x, seeds, sd)), t_min=s.t_min, n_boot=0).alpha

    if s.judge == "equivalence":  # paired sides bend alike
        return abs(alpha(ALPHA_REF + truth.values[0]) - alpha(ALPHA_REF) - truth.values[0])
    if s.judge in ("near_zero", "in_range"):
        return abs(alpha(own_alpha(t, s.t_min, truth.values[0], s.seeds, sd), s.seeds) - truth.values[0])
    if s.judge == "at_least":
        ref = criteria.dilution_alpha(s.prompt_len, [s.t_min, s.t_max])
        return abs(alpha(own_alpha(t, s.t_min, ref + truth.values[0], s.seeds, sd), s.seeds) - ref - truth.values[0])
    if s.judge == "beyond":  # each seed its own model: no seed effect
        return max(abs(alpha(own_alpha(t, s.t_min, v, 1, sd)) - v) for v in truth.values)
    if s.judge == "every_above_zero":
        return max(abs(alpha(ALPHA_REF + v, s.seeds) - alpha(ALPHA_REF, s.seeds) - v) for v in truth.values)
    if s.judge == "shape_test":
        w = shape_window(s)
        return max(abs(-fit_power_law(t[w - 1:], np.exp(own_slope(s, v) * x[w - 1:] + bend(x[w - 1:], 1, sd)), t_min=w,
                                      n_boot=0).alpha - v) for v in truth.values)
    if s.judge == "rise":
        return max(abs(_rise_of(t, -ALPHA_REF * np.log(t) + rise_coefficient(t, v) * _rise_shape(t)) - v)
                   for v in truth.values)
    raise KeyError(s.judge)


def calibrate(s: Setting, draws: int, n_boot: int, seed: int = 0, truths: tuple[Truth, ...] | None = None,
              keep: bool = False) -> list[Cell]:
    """Every truth of setting ``s`` (or ``truths``) over ``draws`` draws of ``n_boot`` resamples: one ``Cell`` each.
    The truths share the draws' noise and bootstrap seeds (common random numbers). ``keep``: every cell keeps its
    records (the benchmark moves them to measure the distance at which the judge decides)."""
    judge = JUDGES[s.judge]
    truths = truths_of(s) if truths is None else truths
    rng = np.random.default_rng([seed, list(JUDGES).index(s.judge), judge.settings.index(s)])
    per_draw = [judge.simulate(s, truths, rng, n_boot, k) for k in range(draws)]  # [draws][truth][layer]
    cells = []
    for i, truth in enumerate(truths):
        records = [draw[i] for draw in per_draw]
        verdicts = [judge.verdict(s, r) for r in records]
        estimates = np.array([[getattr(r, judge.statistic) for r in rec] for rec in records])  # [draws, layers]
        intervals = np.array([[getattr(r, judge.interval) for r in rec] for rec in records])  # [draws, layers, 2]
        dofs = np.array([[r.dof for r in rec] for rec in records])
        se = float(np.sqrt(np.mean(np.var(estimates, axis=0, ddof=1))))
        boot_se = (intervals[..., 1] - intervals[..., 0]) / (2 * student_t.ppf((1 + CONFIDENCE) / 2, dofs))
        values = np.asarray(truth.values)
        dof = float(dofs.mean())  # Welch's varies from draw to draw
        cells.append(Cell(
            s, truth, draws, n_boot, truth_check(s, truth), se, float(boot_se.mean() / se),
            float(np.mean((intervals[..., 0] <= values) & (values <= intervals[..., 1]))), dof, _distance(s, truth, se),
            agree=float(np.mean([v == AGREE for v in verdicts])), disagree=float(np.mean([v == DISAGREE for v in verdicts])),
            undecided=float(np.mean([v == NOT_MEASURED for v in verdicts])), theory=_theory(s, truth, se, dof),
            records=records if keep else []))
    return cells


# ---------------------------------------------------------------- where the judge decides, measured


def shift(record, delta: float):
    """``record`` as its fit or difference function returns it for curves times ``t^-delta`` (the estimate and its
    interval moved by ``delta``; ``test_estimates_move_with_the_truth`` checks it against the functions)."""
    name = type(record).__name__
    moved = {"AlphaDifference": ("difference", "ci"), "PowerLawFit": ("alpha", "ci"), "ShapeCheck": ("slope", "interval"),
             "ExponentRise": ("rise", "ci")}[name]
    value, (lo, hi) = getattr(record, moved[0]), getattr(record, moved[1])
    return dataclasses.replace(record, **{moved[0]: value + delta, moved[1]: (lo + delta, hi + delta)})


def measured_decisive_distance(cell: Cell, side: str, grid: np.ndarray | None = None) -> float | None:
    """The smallest distance (SE, on ``grid``) from which the judge, given ``cell``'s draws moved so that the truth
    lies that far on ``side`` of its threshold, reaches that verdict at least 90 % of the time: every layer moved
    there for "agree"; for "disagree" the first layer moved there and the others 10 SE deep on their agree side.
    None where that side is out of reach (``theory_distance``) or never reached on ``grid`` (for "agree" with a band:
    no farther than its centre, half its width from both ends)."""
    s, judge = cell.setting, JUDGES[cell.setting.judge]
    if theory_distance(s, side, cell.dof) is None:
        return None
    grid = np.arange(0.0, 12.01, 0.05) if grid is None else grid
    lo, hi = judge.threshold
    if s.judge in BANDS and side == AGREE:  # no farther than the band's centre
        grid = grid[grid <= (hi - lo) / (2 * cell.se)]
        if not grid.size:
            return None
    current = np.asarray(cell.truth.values)

    def reached(z: float) -> bool:
        if s.judge in BANDS:
            target = np.array([hi - z * cell.se if side == AGREE else hi + z * cell.se])
        else:
            margin, sign, _, _ = _layer_orientation(s)
            depth = np.full(s.layers, z if side == AGREE else 10.0)
            if side == DISAGREE:
                depth[0 if s.judge not in UNANIMOUS else slice(None)] = -z
            target = margin + sign * depth * cell.se
        verdicts = [judge.verdict(s, [shift(r, d) for r, d in zip(rec, target - current)]) for rec in cell.records]
        return np.mean([v == side for v in verdicts]) >= DECISIVE

    if not reached(grid[-1]):
        return None
    low, high = -1, len(grid) - 1  # bisection: the share grows with the distance
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if reached(grid[mid]) else (mid, high)
    return float(grid[high])


# ---------------------------------------------------------------- the requirements


def allowed(draws: int, rate: float, level: float = 0.01) -> int:
    """The most counts of ``draws`` allowed at a nominal ``rate``: one fewer than the first ``k`` with
    ``P(X >= k) < level``, X ~ Binomial(draws, rate)."""
    return next(k for k in range(draws + 2) if binom.sf(k - 1, draws, rate) < level) - 1


def failures(cell: Cell, binomial: bool = True, decided: bool = True) -> list[str]:
    """The requirements ``cell`` breaks, in words: wrong at most ``WRONG_MAX`` (on a boundary each decisive verdict at
    most that); with ``decided``, the truth's verdict at least ``DECISIVE`` of the time where it lies as far as
    ``required_distance``. With ``binomial`` counts are held to ``allowed`` (the test), without it the rates (the table)."""
    def over(rate: float, nominal: float) -> bool:
        return round(rate * cell.draws) > allowed(cell.draws, nominal) if binomial else rate > nominal + 1e-12

    broken = []
    sides = ((AGREE, cell.agree), (DISAGREE, cell.disagree)) if cell.truth.verdict == BOUNDARY else (("wrong", cell.wrong),)
    for name, rate in sides:
        if over(rate, WRONG_MAX):
            broken.append(f"{name} {rate:.1%} > {WRONG_MAX:.0%}")
    needed = cell.required_distance()
    if decided and needed is not None and cell.distance >= needed and over(1 - cell.decided, 1 - DECISIVE):
        broken.append(f"decided {cell.decided:.1%} < {DECISIVE:.0%} at {cell.distance:.1f} SE (from {needed:.1f})")
    return broken


# ---------------------------------------------------------------- the tests

# Cells of the full table (docs/judge_calibration.md: 200 draws) whose wrong verdicts break the requirement beyond
# its binomial noise: (judge, setting index, truth label) -> the measured rate there. test_error_rates leaves their
# wrong verdicts to test_known_wrong_cells, which holds them to the requirement under xfail(strict=True): findings
# about the judges, nothing loosened.
# None now: the rise's cells were here (its interval over the mean curve covered 66 % at 4 pairs, and a zero rise
# was called a rise in 16.5 % of the draws) until the rise became the geometric-mean curve's (fit.exponents).
KNOWN_WRONG: dict[tuple[str, int, str], str] = {}

# Settings the benchmark alone runs, for the test's time: the 30-layer real-model rows and sizes between the
# profiles of the slowest judges.
BENCHMARK_ONLY = {("every_above_zero", 4), ("every_above_zero", 5), ("shape_test", 1), ("rise", 1)}
SETTINGS = [(name, k) for name, judge in JUDGES.items() for k in range(len(judge.settings))
            if (name, k) not in BENCHMARK_ONLY]


@functools.lru_cache(maxsize=None)
def _test_cells(judge: str, index: int) -> tuple[Cell, ...]:
    return tuple(calibrate(JUDGES[judge].settings[index], TEST_DRAWS, TEST_BOOT))


@pytest.mark.parametrize("judge, index", SETTINGS, ids=[f"{j}-{k}" for j, k in SETTINGS])
def test_error_rates(judge, index):
    """At ``TEST_DRAWS`` draws of ``TEST_BOOT`` resamples: every truth is the definition on the population curve;
    wrong at most 5 % (binomial slack, ``allowed``) but in the ``KNOWN_WRONG`` cells (asserted apart); the truth's
    verdict at least 90 % of the time (slack) where it lies as far as ``Cell.required_distance``."""
    broken = []
    for cell in _test_cells(judge, index):
        assert cell.truth_check < 1e-9, (cell.truth, cell.truth_check)
        known = (judge, index, cell.truth.label) in KNOWN_WRONG
        broken += [f"{cell.truth.label}: {b}" for b in failures(cell, decided=True)
                   if not (known and not b.startswith("decided"))]
    assert not broken, f"{JUDGES[judge].settings[index].name}: {'; '.join(broken)}"


@pytest.mark.parametrize("key", [pytest.param(key, marks=pytest.mark.skip(reason="a benchmark-only setting"))
                                 if key[:2] in BENCHMARK_ONLY else pytest.param(key, marks=pytest.mark.xfail(
                                     strict=True, reason=f"wrong verdicts {rate} in the full table (docs/judge_calibration.md)"))
                                 for key, rate in KNOWN_WRONG.items()]
                         or [pytest.param(None, marks=pytest.mark.skip(reason="no known cell"))],
                         ids=lambda key: "none" if key is None else f"{key[0]}-{key[1]}-{key[2]}")
def test_known_wrong_cells(key):
    """The requirement itself, as the issue states it, on the cells known to break it: wrong at most 5 % of
    ``TEST_DRAWS`` draws (on a boundary each decisive verdict), no binomial slack (at their measured rates a pass
    would be a surprise worth a look, which strict xfail turns into a failure)."""
    judge, index, label = key
    s = JUDGES[judge].settings[index]
    (cell,) = calibrate(s, TEST_DRAWS, TEST_BOOT, truths=tuple(t for t in truths_of(s) if t.label == label))
    assert not failures(cell, binomial=False, decided=False), f"{s.name}, {label}"


# One cheap setting per judge for the checks of the machinery.
_CHEAP = {"equivalence": 1, "near_zero": 4, "every_above_zero": 4, "shape_test": 2, "rise": 2, "in_range": 0,
          "at_least": 0, "beyond": 1}


@pytest.mark.parametrize("judge", list(JUDGES))
def test_estimates_move_with_the_truth(judge):
    """The equivariance the benchmark's measured distances rest on: the draws of one truth, moved by ``shift``, are
    the fit or difference function's own records at another truth (same noise, same resamples), every layer."""
    s = JUDGES[judge].settings[_CHEAP[judge]]
    cells = calibrate(s, 2, 20, keep=True)
    field, interval = JUDGES[judge].statistic, JUDGES[judge].interval
    reference = cells[0]
    for cell in cells[1:]:
        for moved_draw, own_draw in zip(reference.records, cell.records):
            for layer, (moved, own) in enumerate(zip(moved_draw, own_draw)):
                moved = shift(moved, cell.truth.values[layer] - reference.truth.values[layer])
                assert getattr(moved, field) == pytest.approx(getattr(own, field), abs=1e-9)
                assert getattr(moved, interval) == pytest.approx(getattr(own, interval), abs=1e-9)


def test_theory_of_deciding():
    """The noncentral t's 90 % distance: z_0.975 + z_0.90 = 3.24 SE with a known standard error, more with few
    degrees of freedom, Bonferroni's quantile or layers that must all hold; and ``allowed``'s slack at 30 draws."""
    assert decisive_distance(1e7) == pytest.approx(1.959964 + 1.281552, abs=2e-3)
    assert decisive_distance(31) < decisive_distance(7) < decisive_distance(2)
    assert decisive_distance(7, statements=2) > decisive_distance(7) and decisive_distance(7, layers=2) > decisive_distance(7)
    assert float(decides(decisive_distance(7), 7)) == pytest.approx(0.9, abs=1e-6)
    assert (allowed(30, WRONG_MAX), allowed(30, 1 - DECISIVE)) == (5, 7)
