"""Coverage of the intervals the claims are judged by, checked by simulation at the sizes used.

A 95 % interval must hold the true value in about 95 % of repeated experiments. The offsets are
simulated with the per-pair spread measured on SmolLM2-135M-Instruct's own offsets (quick
reproduction, T 512, 8 held-out text pairs, layers 1, 15 and 30, fitted per pair on t >= 32):

    log d_i(t) = a_i - (alpha + b_i) (log t - log 100) + e_i(t)

with a_i ~ N(0, 0.22) (the pair's level at t = 100), b_i ~ N(0, 0.1) (its own exponent's spread)
and e_i an AR(1) series in t, standard deviation 0.4, lag-1 correlation 0.6. The quantity
``fit_power_law`` estimates is the exponent of the best power law to the *population* mean curve
on the window: with Gaussian b_i that mean is ``t^-alpha exp(0.1^2 (log t - log 100)^2 / 2)``
up to a constant, known in closed form, so the truth here is computed without the code under test.
A percentile bootstrap covers 88 % at 8 pairs in this simulation (the interval the project
used before); the criterion below is at least 93 % for the nominal 95 %. The intervals of
``power_law_tolerance`` (the largest |log residual| of a power law and of its prediction) are
checked the same way, on the small untrained models' spread, with the true curve near the
tolerance. The paired interval of a difference (``paired_alpha_difference``: one set of pairs under
two conditions) is checked on pairs whose two measurements share most of their level, exponent and
residuals, at the rows' sizes, within a binomial tolerance of 95 % on both sides.
"""

import numpy as np
import pytest

from nohair_jax.fit import _bin_mean, _log_bins, alpha_difference, fit_power_law

T, T_MIN, ALPHA = 512, 32, 0.6
SPREAD = dict(level=0.22, exponent=0.1, noise=0.4, lag1=0.6)
DATASETS = 600


def _true_alpha(exponent_spread: float) -> float:
    """The best power law's exponent to the population mean curve on [T_MIN, T], binned as the fits
    bin (8 bins per decade, mean log t and mean log d per bin), by ordinary least squares."""
    t = np.arange(T_MIN, T + 1, dtype=np.float64)
    log_mean = -ALPHA * np.log(t) + 0.5 * exponent_spread**2 * (np.log(t) - np.log(100)) ** 2
    _, starts = _log_bins(t, T_MIN, T, 8)
    x, y = _bin_mean(np.log(t), starts), _bin_mean(log_mean, starts)
    return -np.polyfit(x, y, 1)[0]


def _offsets(rng, n_pairs: int, level_shift=None, length: int = T, spread: dict = SPREAD) -> np.ndarray:
    """Simulated offsets [n_pairs, length]; ``level_shift`` [n_pairs] adds a per-pair level (a seed effect)."""
    t = np.arange(1, length + 1, dtype=np.float64)
    a = rng.normal(0, spread["level"], (n_pairs, 1)) + (0 if level_shift is None else level_shift[:, None])
    b = rng.normal(0, spread["exponent"], (n_pairs, 1))
    phi, sd = spread["lag1"], spread["noise"]
    shocks = rng.normal(0, sd * np.sqrt(1 - phi**2), (n_pairs, length))
    noise = np.empty_like(shocks)
    noise[:, 0] = rng.normal(0, sd, n_pairs)
    for k in range(1, length):
        noise[:, k] = phi * noise[:, k - 1] + shocks[:, k]
    return np.exp(a - (ALPHA + b) * (np.log(t) - np.log(100)) + noise)


def _coverage(intervals, truth: float) -> float:
    return float(np.mean([lo <= truth <= hi for lo, hi in intervals]))


@pytest.mark.parametrize("n_pairs", [8, 16])
def test_alpha_interval_covers_at_the_pair_counts_used(n_pairs):
    rng = np.random.default_rng(n_pairs)
    t = np.arange(1, T + 1)
    truth = _true_alpha(SPREAD["exponent"])
    intervals = [fit_power_law(t, _offsets(rng, n_pairs), t_min=T_MIN, seed=k).ci for k in range(DATASETS)]
    assert _coverage(intervals, truth) >= 0.93


def test_hierarchical_interval_covers_with_three_seeds():
    """3 seeds of 4 pairs, each seed shifting its pairs' level and exponent alike (a seed effect as
    large as the pairs' own spread): the interval resamples seeds, then pairs, with 2 degrees of
    freedom."""
    rng = np.random.default_rng(3)
    t = np.arange(1, T + 1)
    groups = np.repeat(np.arange(3), 4)
    truth = _true_alpha(SPREAD["exponent"] * np.sqrt(2))  # pair and seed exponent spreads add
    intervals = []
    for k in range(DATASETS // 2):
        d = _offsets(rng, 12, level_shift=np.repeat(rng.normal(0, SPREAD["level"], 3), 4))
        seed_exponent = np.repeat(rng.normal(0, SPREAD["exponent"], 3), 4)[:, None]
        d = d * np.exp(-seed_exponent * (np.log(t) - np.log(100)))
        intervals.append(fit_power_law(t, d, t_min=T_MIN, groups=groups, seed=k).ci)
    assert _coverage(intervals, truth) >= 0.93


def test_difference_interval_covers_zero_between_two_samples_of_one_population():
    """Two independent sets of 8 pairs from the same population: the interval of the difference of
    their alphas must hold 0 at least 93 % of the time."""
    rng = np.random.default_rng(5)
    t = np.arange(1, T + 1)
    intervals = [alpha_difference(t, _offsets(rng, 8), _offsets(rng, 8), t_min=T_MIN, seed=k).ci
                 for k in range(DATASETS // 2)]
    assert _coverage(intervals, 0.0) >= 0.93


# The small untrained models' own spread (depth 4, T 1024, 8 pairs: level sd 0.12, exponent sd 0.02,
# residual sd 0.04, lag-1 correlation 0.4): what the "approximately a power law" claim is judged on.
SMALL_MODELS = dict(level=0.12, exponent=0.02, noise=0.04, lag1=0.4)


@pytest.mark.parametrize("wiggle", [0.0, 0.1])
def test_power_law_tolerance_intervals_cover_the_true_deviations(wiggle):
    """Offsets times exp(wiggle sin(2 pi log(t / 32) / log 32)): with 0.1 the true largest |log
    residual| (0.072) and the prediction's (0.16) lie near the 10 % tolerance, where the verdict turns.
    The truth is the population mean curve's, binned and fitted by numpy's polyfit."""
    from nohair_jax.fit import power_law_tolerance

    length = 1024
    t = np.arange(1, length + 1, dtype=np.float64)
    shape = lambda t: wiggle * np.sin(2 * np.pi * np.log(t / 32) / np.log(32))  # noqa: E731
    inside = np.arange(32, length + 1, dtype=np.float64)
    _, starts = _log_bins(inside, 32, length, 8)
    spread = SMALL_MODELS["exponent"]
    x = _bin_mean(np.log(inside), starts)
    y = _bin_mean(-ALPHA * np.log(inside) + 0.5 * spread**2 * (np.log(inside) - np.log(100)) ** 2 + shape(inside), starts)
    first = x <= (x[0] + x[-1]) / 2
    truth = (np.abs(y - np.polyval(np.polyfit(x, y, 1), x)).max(),
             np.abs(y[~first] - np.polyval(np.polyfit(x[first], y[first], 1), x[~first])).max())
    rng = np.random.default_rng(7)
    results = [power_law_tolerance(t, _offsets(rng, 8, length=length, spread=SMALL_MODELS) * np.exp(shape(t)), seed=k,
                                   n_boot=300) for k in range(DATASETS // 3)]
    assert _coverage([r.ci for r in results], truth[0]) >= 0.93
    assert _coverage([r.holdout_ci for r in results], truth[1]) >= 0.93


# SmolLM2's config at its stated initialisation (quick reproduction, layer 2, the noisiest of the
# layers the rise is judged at: level sd 0.12, residual sd 0.10, lag-1 correlation 0.08).
SMOLLM2_AT_INIT = dict(level=0.12, exponent=0.02, noise=0.1, lag1=0.08)


@pytest.mark.parametrize("spread", [SMOLLM2_AT_INIT, SPREAD], ids=["smollm2-at-init", "trained-spread"])
def test_local_exponent_rise_interval_covers(spread):
    """Offsets t^-0.6 (log t)^2, T 512, 8 pairs, with the spread of SmolLM2's config at init and a trained
    model's (AR(1) residuals): the interval of the local exponent's rise (last quarter of the log bins minus
    first, from t = 4 as the parts measure it: ``experiments.RISE_T_MIN``) must hold the population's rise,
    that of its geometric-mean curve ``t^-0.6 log(t + 1)^2`` (the pairs' effects are 0 on average in log),
    from its closed form binned as ``local_exponent`` bins."""
    from nohair_jax.fit import local_exponent_rise

    from nohair_jax.experiments import RISE_T_MIN

    t = np.arange(1, T + 1, dtype=np.float64)
    inside = t[RISE_T_MIN - 1:]
    _, starts = _log_bins(inside, RISE_T_MIN, T, 8)
    x, y = _bin_mean(np.log(inside), starts), _bin_mean(-ALPHA * np.log(inside) + 2 * np.log(np.log(inside + 1)), starts)
    exponents = -np.diff(y) / np.diff(x)
    k = max(1, exponents.size // 4)
    truth = exponents[-k:].mean() - exponents[:k].mean()
    rng = np.random.default_rng(11)
    intervals = [local_exponent_rise(t, _offsets(rng, 8, spread=spread) * np.log(t + 1) ** 2, t_min=RISE_T_MIN).ci
                 for _ in range(DATASETS // 3)]
    assert truth > 0.3 and _coverage(intervals, truth) >= 0.93


# One set of pairs measured under two conditions (a shared first token or not, with and without the
# logit bias, the Jacobian beside the finite offsets): a pair's level, exponent and residual series are
# largely its own under both. The per-pair spread of log alpha on SmolLM2 is sd 0.28, which SPREAD
# gives with an exponent sd of 0.135 (fitted per pair on t >= 32: 0.28).
PAIRED_SPREAD = dict(SPREAD, exponent=0.135)


def _paired_offsets(rng, datasets: int, n_pairs: int, share: float, delta: float, n_seeds: int = 1):
    """Offsets of one set of pairs under two conditions, ``(d_a, d_b)`` each [datasets, n_pairs, T].

    Every effect of a pair (its level, its exponent, its AR(1) residual series; over ``n_seeds`` > 1,
    also its seed's level and exponent, as in the hierarchical test above) is under condition b
    ``share`` times its value under a plus ``sqrt(1 - share^2)`` times a fresh draw: both sides have
    PAIRED_SPREAD's law, a pair's two measurements correlate by ``share``, and b decays faster by
    ``delta``, so the true alpha(a) - alpha(b) is ``-delta`` (the spreads' bias is the same on both sides).
    Vectorised over datasets: the residual series are an AR(1) filter along t."""
    from scipy.signal import lfilter

    x = np.log(np.arange(1, T + 1)) - np.log(100)
    spread, size = PAIRED_SPREAD, (datasets, n_pairs, 1)
    phi, sd = spread["lag1"], spread["noise"]

    def effects() -> np.ndarray:
        level, exponent = rng.normal(0, spread["level"], size), rng.normal(0, spread["exponent"], size)
        if n_seeds > 1:
            level = level + np.repeat(rng.normal(0, spread["level"], (datasets, n_seeds, 1)), n_pairs // n_seeds, axis=1)
            exponent = exponent + np.repeat(rng.normal(0, spread["exponent"], (datasets, n_seeds, 1)), n_pairs // n_seeds, axis=1)
        shocks = rng.normal(0, sd * np.sqrt(1 - phi**2), (datasets, n_pairs, T))
        shocks[..., 0] /= np.sqrt(1 - phi**2)  # the series starts in its stationary law
        return level - exponent * x + lfilter([1.0], [1.0, -phi], shocks, axis=-1)

    own, fresh = effects(), effects()
    return np.exp(own - ALPHA * x), np.exp(share * own + np.sqrt(1 - share**2) * fresh - (ALPHA + delta) * x)


def _within_binomial(coverage: float, datasets: int, nominal: float = 0.95) -> bool:
    """``coverage`` of ``datasets`` intervals lies in the central 99 % of Binomial(datasets, nominal) / datasets."""
    from scipy.stats import binom

    lo, hi = binom.interval(0.99, datasets, nominal)
    return lo / datasets <= coverage <= hi / datasets


@pytest.mark.parametrize("n_pairs, n_seeds, share", [
    (8, 1, 0.95),  # the paired rows' pair count (sinks, the bias at inference, the Jacobian, logit_bias): quick
    (8, 1, 0.0),  # pairing that buys nothing must not cost coverage
    (16, 1, 0.95),  # the full profiles
    (12, 3, 0.95),  # fresh initialisations: 3 seeds of 4 pairs (SmolLM2 at init, the sweep), 2 degrees of freedom
])
def test_paired_difference_interval_covers_at_the_sizes_the_paired_rows_use(n_pairs, n_seeds, share):
    """The paired interval of alpha(a) - alpha(b) holds the true difference in 95 % of 400 datasets,
    within a binomial tolerance on both sides (too wide is as wrong as too narrow), and where a pair's
    two measurements correlate it is much narrower than the unpaired one of the same data. 1600 / n_pairs
    resamples per interval (the rows use 1000): a noisier standard error only lowers coverage."""
    from nohair_jax.fit import paired_alpha_difference

    datasets, delta, n_boot = 400, 0.1, 1600 // n_pairs
    rng = np.random.default_rng(n_pairs + 100 * n_seeds + int(10 * share))
    d_a, d_b = _paired_offsets(rng, datasets, n_pairs, share, delta, n_seeds)
    t = np.arange(1, T + 1)
    groups = np.repeat(np.arange(n_seeds), n_pairs // n_seeds) if n_seeds > 1 else None
    paired = [paired_alpha_difference(t, a, b, t_min=T_MIN, groups=groups, n_boot=n_boot, seed=k)
              for k, (a, b) in enumerate(zip(d_a, d_b))]
    assert {r.dof for r in paired} == {(n_seeds if n_seeds > 1 else n_pairs) - 1.0}
    coverage = _coverage([r.ci for r in paired], -delta)
    assert _within_binomial(coverage, datasets), coverage
    if share > 0:
        unpaired = [alpha_difference(t, a, b, t_min=T_MIN, groups_a=groups, groups_b=groups, n_boot=n_boot, seed=k)
                    for k, (a, b) in enumerate(zip(d_a[:20], d_b[:20]))]
        assert np.median([np.ptp(p.ci) / np.ptp(u.ci) for p, u in zip(paired, unpaired)]) < 0.5
