"""Bootstrap resampling of pairs and the Student-t intervals built from it (docs/definitions.md#intervals).

A statistic's standard error comes from its bootstrap replicates over pairs (or over groups of pairs,
such as the seeds they were measured on); the interval is ``estimate -+ q * standard_error`` with ``q``
the Student-t quantile at ``units - 1`` degrees of freedom (``t_interval``): a percentile bootstrap over
8 pairs covers well under its nominal level, while these intervals' coverage is checked by simulation
in ``tests/test_coverage.py``. Resampled indices are int ``[n_boot, n_pairs]``; everything else float64.
"""

from __future__ import annotations

import numpy as np

from nohair_jax.fit._checks import _check_confidence, _check_groups
from nohair_jax.fit.binning import summary_curve

# Bootstrap resamples are gathered in chunks of at most this many float64 elements
# (32 MiB), so that n_boot * n_pairs * T never has to fit in memory at once.
_BOOT_CHUNK_ELEMENTS = 1 << 22


def t_quantile(p, dof):
    """The Student-t quantile at probability ``p`` with ``dof`` degrees of freedom (elementwise). It is
    scipy.stats' ``t.ppf`` (which calls this ``stdtrit``), read from scipy.special: importing scipy.stats
    takes 1.6 s, paid by every command that fits."""
    from scipy.special import stdtrit

    return stdtrit(dof, p)


def bootstrap_indices(n_pairs: int, n_boot: int, seed: int, groups=None, *, whole_groups: bool = False) -> np.ndarray:
    """Resampled pair indices int ``[n_boot, n_pairs]`` (``numpy.random.default_rng(seed)``).

    Without ``groups``, or with one group: pairs with replacement. With several ``groups`` (a label per
    pair; every group the same size): a hierarchical bootstrap, groups with replacement, then pairs with
    replacement within each chosen group; with ``whole_groups``, each chosen group with all its pairs.

    ``whole_groups`` is for a paired interval over independent units (``paired_alpha_difference``): drawing
    a chosen group's pairs again counts their spread twice, once in the spread of the group means and once
    more within, and the paired interval over 3 seeds of 4 pairs then covered 99 to 100 % in simulation
    instead of 95 % (``tests/test_coverage.py``; whole groups: 93 to 97 %).
    """
    rng = np.random.default_rng(seed)
    if groups is not None:
        groups = _check_groups("groups", groups, n_pairs)
    if groups is None or np.unique(groups).size == 1:
        return rng.integers(0, n_pairs, size=(n_boot, n_pairs))
    members = np.stack([np.flatnonzero(groups == g) for g in np.unique(groups)])  # [G, size]
    chosen = rng.integers(0, len(members), size=(n_boot, len(members)))  # [n_boot, G]
    if whole_groups:
        return members[chosen].reshape(n_boot, n_pairs)
    size = members.shape[1]
    within = rng.integers(0, size, size=(n_boot, len(members), size))  # [n_boot, G, size]
    return members[chosen[..., None], within].reshape(n_boot, n_pairs)


def _resampled_curves(d: np.ndarray, resamples: np.ndarray, summary: str):
    """The summary curve (``binning.summary_curve``) of each resample of the pairs: ``d [n_pairs, T]``,
    ``resamples`` int ``[n_boot, n_pairs]`` (``bootstrap_indices``); yields ``[b, T]`` for consecutive
    blocks of resamples, each within ``_BOOT_CHUNK_ELEMENTS``.

    The mean (and the geometric mean, a mean of logs) is each pair's count in a resample times its
    curve: one matrix product, no ``[b, n_pairs, T]`` copy of the gathered pairs (a fit of 16 pairs at
    T = 512 and 1000 resamples: 6 ms instead of 18, ``benchmarks/bootstrap.py``). The median gathers the pairs.
    """
    n_pairs, n_boot = d.shape[0], len(resamples)
    values = np.log(d) if summary == "geomean" else d
    chunk = max(1, _BOOT_CHUNK_ELEMENTS // (d.size if summary == "median" else d.shape[-1] + n_pairs))
    for start in range(0, max(n_boot, 1), chunk):  # no resamples: one empty block, [0, T]
        idx = resamples[start:start + chunk]
        if summary == "median":
            yield summary_curve(d[idx], summary)
            continue
        rows = np.arange(len(idx))[:, None] * n_pairs
        counts = np.bincount((rows + idx).ravel(), minlength=len(idx) * n_pairs).reshape(len(idx), n_pairs)
        mean = counts.astype(np.float64) @ values / idx.shape[1]
        yield mean if summary == "mean" else np.exp(mean)


def _units(n_pairs: int, groups) -> int:
    """The independent units an interval's degrees of freedom count: the groups (seeds) where there
    are several, else the pairs (one group's hierarchical bootstrap resamples its pairs)."""
    n_groups = 1 if groups is None else int(np.unique(groups).size)
    return n_groups if n_groups > 1 else n_pairs


def _standard_error(replicates: np.ndarray, units: int) -> np.ndarray:
    """The standard error of a statistic from its bootstrap replicates ``[n_boot, ...]`` over ``units``
    resampled units (pairs, or groups in a hierarchical bootstrap), scaled by ``sqrt(units / (units -
    1))``: the bootstrap's variance of a mean is the plug-in ``(units - 1) / units`` of the unbiased
    one. Shape ``[...]``."""
    return np.std(replicates, axis=0, ddof=1) * np.sqrt(units / max(units - 1, 1))


def _welch_dof(se: list[float], dof: list[int]) -> float:
    """Welch-Satterthwaite degrees of freedom of a difference of two independent estimates."""
    total = sum(s**2 for s in se) ** 2
    parts = sum(s**4 / max(k, 1) for s, k in zip(se, dof))
    return float(total / parts) if parts > 0 else float(sum(dof))


def bonferroni(ci: tuple[float, float] | None, dof: float | None, statements: int,
               confidence: float = 0.95) -> tuple[float, float] | None:
    """A ``t_interval`` ``ci`` at ``confidence`` widened so that ``statements`` of them hold at once with that
    confidence (Bonferroni: each at ``1 - (1 - confidence) / statements``), for a row that tests
    every layer; None where there is no interval or no degrees of freedom to widen it by."""
    if ci is None or dof is None:
        return None
    centre, half = (ci[0] + ci[1]) / 2, (ci[1] - ci[0]) / 2
    widen = t_quantile(1 - (1 - confidence) / (2 * statements), dof) / t_quantile((1 + confidence) / 2, dof)
    return (float(centre - half * widen), float(centre + half * widen))


def t_interval(estimate: float, standard_error: float, dof: float, confidence: float = 0.95) -> tuple[float, float]:
    """``estimate -+ q * standard_error``, ``q`` the Student-t quantile at ``(1 + confidence) / 2`` with
    ``dof`` degrees of freedom (``dof`` = units - 1: pairs, or seeds in a hierarchical bootstrap).

    The intervals of this package are built so (docs/definitions.md#intervals): a percentile bootstrap
    over 8 pairs covers well under its nominal level, while this interval's coverage at the sample
    sizes the project uses is checked by simulation in ``tests/test_coverage.py``.
    """
    _check_confidence(confidence)
    if not dof > 0:
        raise ValueError(f"a t-interval needs dof > 0 (at least two units), got dof = {dof!r}")
    q = float(t_quantile((1 + confidence) / 2, dof))
    return (float(estimate - q * standard_error), float(estimate + q * standard_error))


def _largest_abs_interval(values: np.ndarray, se: np.ndarray, dof: float, confidence: float) -> tuple[float, float]:
    """An interval for ``max_b |v_b|`` from per-bin t-intervals ``v_b -+ q se_b`` (``n`` bins).

    The upper end is the largest upper end of ``|v_b|`` over the bins with each interval at
    ``confidence``: at or below a tolerance, every bin lies within it, each at 95 % (all must hold,
    so no correction is needed). The lower end is the largest lower end of ``|v_b|`` with each
    interval widened for the ``n`` bins (Bonferroni): above a tolerance, some bin lies beyond it with
    95 % confidence over all bins at once. A largest |residual| itself is pushed up by noise; these
    per-bin intervals are not (their coverage: ``tests/test_coverage.py``)."""
    def abs_bounds(q: float) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = values - q * se, values + q * se
        straddles = (lo <= 0) & (hi >= 0)
        return np.where(straddles, 0.0, np.minimum(np.abs(lo), np.abs(hi))), np.maximum(np.abs(lo), np.abs(hi))

    each = t_quantile((1 + confidence) / 2, dof)
    every = t_quantile(1 - (1 - confidence) / (2 * values.size), dof)
    return float(abs_bounds(every)[0].max()), float(abs_bounds(each)[1].max())
