"""Calibration of the "approximately a power law" verdict (claim ``power_law``): its error rates on
synthetic curves whose verdict is known, at the claim's window and pair counts.

The verdict is ``fit.power_law_tolerance(...).within(POWER_LAW_TOLERANCE)`` on the claim's window,
``t`` in ``[32, 2048]`` (the quick profile's ``length``; the alpha fit's window starts at 32), 8 bins
per decade, at 8 and 16 pairs (the quick profile measures 16).

Families (``FAMILIES``): a pure power law; the relay shape ``(log t)^k / t`` at depths 2 to 4
(``k = L - 1``: 1, 2, 3); ``P / (P + t)`` with ``P = 16``; ``1 / log t``; a power law with a 3 %
wiggle, ``t^-0.6 (1 + 0.03 sin(2 pi log10 t))``; two knees, exponent 0.4 turning to 0.6 and to 0.8
around ``t = 256``; an exponential ``e^(-t / 1000)``. Neither the families nor any tolerance were
changed after error rates were seen; the noise model was, once: log-normal exponents gave a first
table whose truths were overflow (their population mean does not exist, below).

Noise (``draw_offsets``): pair ``i`` of a draw is

    d_i(t) = c_i (f(t) / f(t0))^(m_i) exp(e_i(t)),   t0 = 100,

a pair's curve the family's with its own exponent, ``alpha_i / alpha_0 = m_i``, ``m_i ~ N(1, 0.28)``
(0.28: the spread of ``log alpha`` over pairs measured on SmolLM2-135M; a normal ``m_i`` rather than
a log-normal one because the mean of log-normal exponents does not exist where the pairs' curves
rise above ``f(t0)``, before ``t0``: ``E[x^m]`` diverges for ``x > 1``); ``log c_i ~ N(0, 0.22)``,
the pairs' level spread at ``t0 = 100`` on SmolLM2 (tests/test_coverage.py); ``e_i(t) ~ N(0, 0.04)``
independent per position (small: the untrained models' residual sd).

The truth. The verdict is about the mean curve of the population of pairs, which the mean over a
draw's pairs estimates. With exponents that differ between pairs that mean is not the family's own
curve: mixing exponents bends it, ``log E[(f / f0)^m] = L + 0.28^2 L^2 / 2`` with ``L = log(f / f0)``
(exact for normal ``m``), up to a constant. Each family's noiseless verdict is the definition applied
to that population mean curve, on the same window and bins (``power_law_tolerance`` of one curve: no
interval, the values themselves); the family's own curve's verdict is reported beside it (``own``).

Distance from the tolerance, in noise standard errors: for each bin's residual (the best fit's and
the prediction's), ``(tolerance - |r_b|) / se_b``, ``se_b`` the standard deviation of that bin's
residual over the draws; a curve within the tolerance is as far from it as its closest bin, one
beyond it as far as its farthest bin beyond.

Requirements (per family and pair count, over the draws): wrong verdicts at most 5 %; "not measured"
at most 10 % where the truth is more than one noise standard error from the tolerance.

The test runs a stated subset (``TEST_DRAWS`` draws of each family and pair count, ``N_BOOT``
bootstrap resamples each) under the same requirements; ``benchmarks/power_law_calibration.py``
writes the full table (``BENCH_DRAWS`` draws, the same ``N_BOOT``, and a check of a quarter of the
draws against the claim's own 1000 resamples) to docs/power_law_calibration.md. The requirements
are not all met: every cell meets the one on wrong verdicts (at most 0.5 % in the full table), but
11 of the 20 cells break the one on "not measured", all of them truths within 4 noise standard
errors of the tolerance, 10 of them nearer than a 95 % interval can decide 90 % of the time (below).
They are listed, with their numbers, in ``KNOWN_UNDECIDED``, where the test holds them to the
wrong-verdict requirement only; nothing was tuned to change them.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from nohair_jax.experiments.untrained_alpha import POWER_LAW_TOLERANCE, PROFILES
from nohair_jax.fit import PowerLawTolerance, fit_from_dict, power_law_tolerance

T_MIN, T_MAX = 32, PROFILES["quick"]["length"]  # the claim's window: the alpha fit's, [32, T]
T0 = 100.0  # where SmolLM2's level spread was measured: the pairs' curves fan out around it
PAIRS = (8, PROFILES["quick"]["n_pairs"])
EXPONENT_SD, LOG_LEVEL_SD, POSITION_SD = 0.28, 0.22, 0.04
N_BOOT = 100  # resamples per draw (the claim's 1000: the benchmark checks the verdicts agree)
TEST_DRAWS, BENCH_DRAWS = 30, 200
WRONG_MAX, UNDECIDED_MAX = 0.05, 0.10

FAMILIES = {
    "power law t^-0.6": lambda t: t**-0.6,
    "(log t)^1 / t (depth 2)": lambda t: np.log(t) / t,
    "(log t)^2 / t (depth 3)": lambda t: np.log(t) ** 2 / t,
    "(log t)^3 / t (depth 4)": lambda t: np.log(t) ** 3 / t,
    "P / (P + t), P = 16": lambda t: 16 / (16 + t),
    "1 / log t": lambda t: 1 / np.log(t),
    "t^-0.6 (1 + 0.03 sin(2 pi log10 t))": lambda t: t**-0.6 * (1 + 0.03 * np.sin(2 * np.pi * np.log10(t))),
    "knee 0.4 -> 0.6 at t = 256": lambda t: t**-0.4 * (1 + (t / 256) ** 2) ** -0.1,
    "knee 0.4 -> 0.8 at t = 256": lambda t: t**-0.4 * (1 + (t / 256) ** 2) ** -0.2,
    "e^(-t / 1000)": lambda t: np.exp(-t / 1000),
}

# Cells of the full table (docs/power_law_calibration.md: 200 draws) that break the "not measured" requirement:
# (family, pairs) -> not measured, distance. All lie within 4 noise standard errors of the tolerance. A 95 % interval
# cannot do better near it: a truth z SE inside is decided about Phi(z - q) of the time, q the t quantile (2.36 at
# 8 pairs, 2.13 at 16), so at most 10 % undecided needs z >= q + 1.28, 3.6 and 3.4 SE (beyond it, with the lower
# end widened for the bins, 5.6 and 4.8). All but the wiggle at 8 pairs (3.8 SE, 11.5 %: 1.5 points over, its
# binomial error at 200 draws 2.3) lie nearer than that. Their wrong verdicts are still held to WRONG_MAX.
KNOWN_UNDECIDED: dict[tuple[str, int], str] = {
    ("(log t)^1 / t (depth 2)", 8): "30.5 % at 2.1 SE",
    ("(log t)^1 / t (depth 2)", 16): "16.0 % at 3.1 SE",
    ("(log t)^2 / t (depth 3)", 8): "46.0 % at 2.2 SE",
    ("(log t)^2 / t (depth 3)", 16): "11.0 % at 2.8 SE",
    ("(log t)^3 / t (depth 4)", 8): "87.0 % at 1.4 SE",
    ("(log t)^3 / t (depth 4)", 16): "76.5 % at 1.8 SE",
    ("P / (P + t), P = 16", 8): "59.0 % at 2.0 SE",
    ("P / (P + t), P = 16", 16): "24.0 % at 2.6 SE",
    ("t^-0.6 (1 + 0.03 sin(2 pi log10 t))", 8): "11.5 % at 3.8 SE",
    ("knee 0.4 -> 0.6 at t = 256", 8): "11.0 % at 2.9 SE",
    ("knee 0.4 -> 0.8 at t = 256", 16): "78.0 % at 1.2 SE",
}


def positions() -> np.ndarray:
    """The claim's window, the only positions the verdict reads."""
    return np.arange(T_MIN, T_MAX + 1, dtype=np.float64)


def population_mean(name: str, t: np.ndarray) -> np.ndarray:
    """``E[(f(t) / f(t0))^m]`` over ``m ~ N(1, EXPONENT_SD)``, ``exp(L + EXPONENT_SD^2 L^2 / 2)`` with
    ``L = log(f / f0)``: the mean curve of infinitely many pairs up to a constant (levels and position
    noise only scale it)."""
    f = FAMILIES[name]
    log_ratio = np.log(f(t) / f(np.array(T0)))
    return np.exp(log_ratio + EXPONENT_SD**2 * log_ratio**2 / 2)


def draw_offsets(rng: np.random.Generator, name: str, n_pairs: int, draws: int, t: np.ndarray) -> np.ndarray:
    """``[draws, n_pairs, len(t)]`` offsets of the noise model (module docstring), all at once."""
    f = FAMILIES[name]
    log_ratio = np.log(f(t) / f(np.array(T0)))
    m = rng.normal(1, EXPONENT_SD, (draws, n_pairs, 1))
    level = rng.normal(0, LOG_LEVEL_SD, (draws, n_pairs, 1))
    return np.exp(level + m * log_ratio + rng.normal(0, POSITION_SD, (draws, n_pairs, t.size)))


def truth(name: str, t: np.ndarray):
    """The noiseless records: of the population mean curve (the verdict's truth) and of the family's
    own curve, each ``power_law_tolerance`` of one curve on the window."""
    return power_law_tolerance(t, population_mean(name, t)), power_law_tolerance(t, FAMILIES[name](t))


def calibrate(name: str, n_pairs: int, draws: int, n_boot: int, seed: int = 0, check_boot: int = 0) -> dict:
    """Verdicts of ``draws`` draws of ``n_pairs`` pairs of family ``name``, against its truth.

    Returns the row of the table: the truth's verdict (and the family's own curve's), the distance
    from the tolerance in noise standard errors, the shares of agreeing, wrong and undecided ("not
    measured") verdicts; with ``check_boot``, the share of the first ``draws // 4`` draws whose verdict
    at ``check_boot`` resamples is the same as at ``n_boot`` (the interval's behaviour at the
    ``n_boot`` the table uses), and their share "not measured" at each."""
    t = positions()
    true, own = truth(name, t)
    rng = np.random.default_rng([seed, n_pairs, list(FAMILIES).index(name)])
    d = draw_offsets(rng, name, n_pairs, draws, t)
    results = [power_law_tolerance(t, d[k], n_boot=n_boot, seed=k, cross_validate=False) for k in range(draws)]
    verdicts = [r.within(POWER_LAW_TOLERANCE) for r in results]
    expected = true.within(POWER_LAW_TOLERANCE)
    # The rule before the prediction's tolerance was derived: both statistics held to the same number.
    old = [dataclasses.replace(r, holdout_ratio=1.0).within(POWER_LAW_TOLERANCE) for r in results]
    old_expected = dataclasses.replace(true, holdout_ratio=1.0).within(POWER_LAW_TOLERANCE)
    ratio = true.holdout_ratio
    limits = np.r_[np.full(len(true.residuals), POWER_LAW_TOLERANCE),
                   np.full(len(true.holdout_residuals), POWER_LAW_TOLERANCE * ratio)]
    exact = np.abs(np.r_[true.residuals, true.holdout_residuals])
    se = np.std([np.r_[r.residuals, r.holdout_residuals] for r in results], axis=0, ddof=1)
    margin = (limits - exact) / se  # > 0: inside the tolerance at that bin
    distance = float(margin.min() if expected else (-margin).max())
    row = dict(family=name, pairs=n_pairs, draws=draws, n_boot=n_boot, truth=expected, own=own.within(POWER_LAW_TOLERANCE),
               deviation=true.deviation, holdout=true.holdout, holdout_tolerance=POWER_LAW_TOLERANCE * ratio,
               distance=distance, agree=float(np.mean([v is expected for v in verdicts])),
               wrong=float(np.mean([v is (not expected) for v in verdicts])),
               undecided=float(np.mean([v is None for v in verdicts])), old_truth=old_expected,
               own_deviation=own.deviation, own_holdout=own.holdout,
               own_old=dataclasses.replace(own, holdout_ratio=1.0).within(POWER_LAW_TOLERANCE),
               old_wrong=float(np.mean([v is (not old_expected) for v in old])),
               old_undecided=float(np.mean([v is None for v in old])))
    if check_boot:
        checked = draws // 4
        again = [power_law_tolerance(t, d[k], n_boot=check_boot, seed=k, cross_validate=False).within(POWER_LAW_TOLERANCE)
                 for k in range(checked)]
        row["same_at_check_boot"] = float(np.mean([a is v for a, v in zip(again, verdicts)]))
        row["checked_undecided"] = (float(np.mean([v is None for v in verdicts[:checked]])),
                                    float(np.mean([a is None for a in again])))
    return row


def failures(row: dict, undecided: bool = True) -> list[str]:
    """The requirements ``row`` breaks, in words (empty when it meets them); the "not measured" one only
    with ``undecided``."""
    broken = []
    if row["wrong"] > WRONG_MAX:
        broken.append(f"wrong {row['wrong']:.0%} > {WRONG_MAX:.0%}")
    if undecided and row["distance"] > 1 and row["undecided"] > UNDECIDED_MAX:
        broken.append(f"not measured {row['undecided']:.0%} > {UNDECIDED_MAX:.0%} at {row['distance']:.1f} SE")
    return broken


def test_holdout_ratio_is_the_curvature_ratio_on_the_bins():
    """A log-log quadratic sits exactly at its two tolerances together: the prediction's tolerance is
    the deviation's times the ratio of the two for a unit curvature on the window's own bins (3.71
    here; 13/4 for many equal bins split evenly, checked on a fine even grid). A record saved before
    the ratio was stored gets it from its bins' positions."""
    t = positions()
    for c in (0.01, 0.05):
        record = power_law_tolerance(t, np.exp(-0.6 * np.log(t) + c * np.log(t) ** 2))
        assert record.holdout / record.deviation == pytest.approx(record.holdout_ratio, rel=1e-9)
        assert record.within(record.deviation * (1 + 1e-9)) is True
        assert record.within(record.deviation * (1 - 1e-9)) is False
    assert record.holdout_ratio == pytest.approx(3.7107, abs=1e-4)
    assert PowerLawTolerance.curvature_ratio(np.linspace(0, 4, 2001)) == pytest.approx(13 / 4, rel=1e-3)
    saved = {k: v for k, v in record.to_dict().items() if k != "holdout_ratio"}
    assert fit_from_dict(saved).holdout_ratio == pytest.approx(record.holdout_ratio, rel=1e-3)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_verdict_error_rates(name):
    """Wrong at most 5 %, "not measured" at most 10 % beyond one noise standard error (but in the cells
    of ``KNOWN_UNDECIDED``), at 8 and 16 pairs: ``TEST_DRAWS`` draws each at ``N_BOOT`` resamples (the
    full table: the benchmark)."""
    for n_pairs in PAIRS:
        row = calibrate(name, n_pairs, TEST_DRAWS, N_BOOT)
        broken = failures(row, undecided=(name, n_pairs) not in KNOWN_UNDECIDED)
        assert not broken, f"{name}, {n_pairs} pairs: {'; '.join(broken)} ({row})"
