"""Log-spaced bins of positions, the summary curve over pairs, and least squares in log-log
(docs/definitions.md#fits).

Curves are ``d [n_pairs, T]`` (or ``[T]``) at positions ``t [T]`` (tokens). A window ``[t_min,
t_max]`` is cut into bins with edges ``t_min * 10**(k / bins_per_decade)``; within a bin the average
is taken of ``log y`` and the bin's position is the geometric mean of its ``t``: both are then means
of the same linear function of ``log t`` for a power law, so an exact power law is fitted exactly,
whatever the bins hold. (The arithmetic mean of ``t^-alpha`` over a bin is not ``t_bin^-alpha``, and
on an integer grid the mismatch differs from bin to bin, which would bias ``alpha``.) Float64
throughout.
"""

from __future__ import annotations

import numpy as np

from nohair_jax.fit._checks import (
    _BadWindowError, _check_last_axis, _check_summary, _check_t, _check_window, _py, _real,
)

# A t exactly on a bin edge (t_min * 10**(k / bins_per_decade)) must land in the bin it opens,
# but log10 of it can come out a rounding error short; this slack, far above float64 rounding
# and far below any real gap between positions, puts it where it belongs.
_EDGE_SLACK = 1e-9


def summary_curve(d, summary: str = "mean") -> np.ndarray:
    """Combine pairs: ``[..., n_pairs, T] -> [..., T]``; a single curve ``[T]`` is returned as is.

    ``summary`` is "mean", "geomean" (``exp(mean log d)``) or "median", taken over pairs.
    """
    _check_summary(summary)
    d = _real("d", d)
    if d.ndim == 0:
        raise ValueError(f"d must have at least one axis (positions t), got shape {d.shape}")
    if d.ndim >= 2 and d.shape[-2] == 0:
        raise ValueError(f"d holds no pairs to combine: shape {d.shape}")
    if d.ndim == 1:
        return d.copy()
    if summary == "mean":
        return d.mean(axis=-2)
    if summary == "geomean":
        return np.exp(np.log(d).mean(axis=-2))
    return np.median(d, axis=-2)


def log_binned(t, y, *, t_min, t_max, bins_per_decade=8) -> tuple[np.ndarray, np.ndarray]:
    """Average ``y`` over log-spaced bins of ``t`` in ``[t_min, t_max]`` (inclusive).

    t: ``[T]`` positive, strictly increasing. y: ``[..., T]``, leading axes kept. Bin edges are
    ``t_min * 10**(k / bins_per_decade)``. Returns ``t_bin [n_bins]``, the geometric mean of the
    ``t`` in each bin, and ``y_bin [..., n_bins]``, the arithmetic mean of ``y`` in each bin;
    empty bins are dropped.
    """
    t = _check_t(t)
    y = np.asarray(y, dtype=np.float64)
    _check_last_axis(t, y, "y")
    _check_window(t, t_min, t_max)
    inside, starts = _log_bins(t, t_min, t_max, bins_per_decade)
    if not inside.any():
        raise _BadWindowError(f"no t lies in the window [{_py(t_min)}, {_py(t_max)}]")
    return np.exp(_bin_mean(np.log(t[inside]), starts)), _bin_mean(y[..., inside], starts)


def _log_bins(t, t_min, t_max, bins_per_decade):
    """Log-spaced bins of the sorted ``t [T]`` in ``[t_min, t_max]``, edges ``t_min * 10**(k / bpd)``.

    Returns ``inside [T]`` (bool) and ``starts [n_bins]``, the index in ``t[inside]`` where each
    non-empty bin begins: ``t`` is sorted, so bins are contiguous runs and empty ones never appear.
    """
    if not bins_per_decade > 0:
        raise ValueError(f"bins_per_decade must be > 0, got bins_per_decade = {bins_per_decade!r}")
    inside = (t >= t_min) & (t <= t_max)
    bins = np.floor(bins_per_decade * np.log10(t[inside] / t_min) + _EDGE_SLACK).astype(np.int64)
    return inside, np.flatnonzero(np.diff(bins, prepend=-1))


def _bin_mean(y, starts):
    """Mean of ``y [..., n]`` over the contiguous bins beginning at ``starts`` -> ``[..., n_bins]``."""
    return np.add.reduceat(y, starts, axis=-1) / np.diff(starts, append=y.shape[-1])


def _ols_loglog(log_t, log_y):
    """Least squares ``log_y = slope * log_t + intercept``, batched over leading axes of log_y.

    log_t: ``[n]``; log_y: ``[..., n]``. Returns slope, intercept, r2, each ``[...]``. Closed
    form, so the point fit and all bootstrap resamples share it without a loop.
    """
    x = log_t - log_t.mean()
    y_mean = log_y.mean(axis=-1)
    slope = (log_y @ x) / (x @ x)
    intercept = y_mean - slope * log_t.mean()
    resid = log_y - (slope[..., None] * log_t + intercept[..., None])
    ss_res = (resid**2).sum(axis=-1)
    ss_tot = ((log_y - y_mean[..., None]) ** 2).sum(axis=-1)
    # A flat curve (alpha = 0) is fitted exactly, but rounding in the logs leaves ss_tot of order
    # n * (eps * |log y|)^2 rather than 0, and 1 - ss_res / ss_tot would be noise: call it r2 = 1.
    rounding = log_y.shape[-1] * (16 * np.finfo(np.float64).eps * np.abs(log_y).max(axis=-1, initial=1.0)) ** 2
    flat = ss_tot <= rounding
    r2 = np.where(flat, 1.0, 1 - ss_res / np.where(flat, 1.0, ss_tot))
    return slope, intercept, r2
