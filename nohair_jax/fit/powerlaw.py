"""The power-law fit of prompt-pair offset curves, on a stated window (docs/definitions.md#fits).

An offset curve is ``d(t) > 0`` at continuation positions ``t = 1..T`` (tokens), measured for many
prompt pairs: an array ``d`` of shape ``[n_pairs, T]`` (or ``[T]`` for one curve). It decays roughly as
``A t^-alpha``; ``fit_power_law`` fits ``alpha`` (dimensionless) and ``A`` (units of ``d``).

The fit window
--------------
``alpha`` depends strongly on where it is measured: on one small trained model the same layer gave
``alpha = 0.35`` for ``t`` in ``[8, 240]`` and ``alpha = 0.56`` for ``t`` in ``[32, 2048]``. The curves
are not pure power laws (the theory predicts ``(log t)^(L-1) / t``, whose local exponent drifts with
``t``), so a window is part of the measurement, not a detail. Therefore:

* the window is fixed by default, ``t`` in ``[32, T]``: below ``t ~ 32`` a log-spaced bin holds only
  one or a few integer positions and the curve still carries the transient of the prompt boundary, so
  the first decade would dominate the slope with its least representative points;
* every ``PowerLawFit`` carries the window actually used (``t_range``) next to ``alpha``;
* ``alpha_vs_window`` maps ``alpha`` over many windows and ``local_exponent`` gives ``alpha(t)``, so
  that a window effect is never mistaken for a finding.

How a fit is made
-----------------
The summary curve over pairs (mean, geometric mean or median) is averaged in log-spaced bins of ``t``
(``bins_per_decade`` per decade, edges starting at ``t_min``; ``binning``), then ``log y_bin`` is
regressed on ``log t_bin`` by ordinary least squares. The confidence interval of ``alpha`` is a
Student-t interval whose standard error comes from a bootstrap over pairs in the same window as the
point fit (``t_interval``; its coverage is checked by simulation in ``tests/test_coverage.py``). A
noise floor ends the window early (``floors``).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from nohair_jax.fit._checks import (
    _BadValuesError, _BadWindowError, _check_confidence, _check_curves, _check_groups, _check_summary,
    _check_values, _check_window, _py, _real,
)
from nohair_jax.fit.binning import _bin_mean, _log_bins, _ols_loglog, summary_curve
from nohair_jax.fit.floors import NoiseFloorError, _floor_crossing
from nohair_jax.fit.intervals import _resampled_curves, _standard_error, _units, bootstrap_indices, t_interval

# What the data, not a setting, refuse: a ``*_or_refuse`` function turns these into ``FitRefused``.
_REFUSALS = (NoiseFloorError, _BadWindowError, _BadValuesError)


@dataclasses.dataclass(frozen=True)
class PowerLawFit:
    """Result of ``fit_power_law``: ``d(t) ~ prefactor * t**-alpha`` over ``t_range``.

    alpha: decay exponent (dimensionless). ci: t-interval of alpha at ``confidence``, its standard
    error bootstrapped over pairs, ``n_pairs - 1`` degrees of freedom (``t_interval``; over groups of
    pairs, then pairs, with ``n_groups - 1`` degrees of freedom when ``n_groups`` is set), None for one
    curve (or one pair) or ``n_boot = 0``: no interval exists. prefactor: in the units
    of ``d``. r2: of the log-log least squares on the ``n_bins`` binned points. t_range: first
    and last position actually used, after floor truncation. floor_t: first position
    ``>= t_min`` where the summary curve fell below ``floor_factor * floor`` (it may lie beyond
    the window's end), None if never or no floor was given. summary: how pairs were combined.
    """

    alpha: float
    ci: tuple[float, float] | None
    prefactor: float
    r2: float
    t_range: tuple[int, int]
    n_bins: int
    floor_t: int | None
    summary: str
    confidence: float
    n_groups: int | None = None  # the hierarchical bootstrap's group count (seeds), None: over pairs only
    dof: float | None = None  # the interval's degrees of freedom (``t_interval``), None without one
    # Why the window mixes two regimes (``fit_layers``: it crosses the t where the prompt leaves a sliding
    # window), None where nothing is known against it.
    caveat: str | None = None

    def brief(self, spec: str = ".2f") -> str:
        """alpha and its interval, ``"0.52 [0.40, 0.61]"``; no brackets where there is no interval; the caveat,
        if any, in parentheses after them."""
        return (format(self.alpha, spec) + ("" if self.ci is None else f" [{self.ci[0]:{spec}}, {self.ci[1]:{spec}}]")
                + ("" if self.caveat is None else f" ({self.caveat})"))

    def to_dict(self) -> dict:
        """Plain ints/floats/None/lists, as ``fit.json`` holds a fit."""
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v for f in dataclasses.fields(self)}


@dataclasses.dataclass(frozen=True)
class FitRefused:
    """A fit that was refused, and why (one line): the window lay below the noise floor, was too
    short, or held values a log cannot take. Stands in a layer's place where ``PowerLawFit`` would."""

    reason: str

    def brief(self, spec: str = ".2f") -> str:
        """``"no fit"`` (``PowerLawFit.brief``'s counterpart)."""
        return "no fit"

    def to_dict(self) -> dict:
        """``{"error": reason}``, as ``fit.json`` holds a refused fit."""
        return {"error": self.reason}


def _or_refuse(fit, *args, **kwargs):
    """``fit(*args, **kwargs)``, or a ``FitRefused`` saying why where the data refuse it (``_REFUSALS``)."""
    try:
        return fit(*args, **kwargs)
    except _REFUSALS as err:
        return FitRefused(str(err))


def fit_or_refuse(t, d, **fit_kwargs) -> PowerLawFit | FitRefused:
    """``fit_power_law(t, d, **fit_kwargs)``, or a ``FitRefused`` saying why where the data refuse a
    fit (below the noise floor, too short a window, values a log cannot take); a bad setting raises."""
    return _or_refuse(fit_power_law, t, d, **fit_kwargs)


def fit_power_law(
    t,
    d,
    *,
    t_min=32,
    t_max=None,
    bins_per_decade=8,
    summary="mean",
    n_boot=1000,
    confidence=0.95,
    seed=0,
    floor=None,
    floor_factor=10.0,
    min_bins=4,
    groups=None,
) -> PowerLawFit:
    """Fit ``d(t) ~ prefactor * t**-alpha`` over ``t`` in ``[t_min, t_max]`` (positions, tokens).

    t: ``[T]`` positive, strictly increasing (normally ``1..T``). d: ``[n_pairs, T]`` or ``[T]``,
    finite and ``> 0`` inside the window. t_max defaults to ``t[-1]``. floor: None, a scalar or
    ``[T]`` absolute noise level in the units of ``d``; the window then ends before the first
    ``t >= t_min`` where the summary curve is below ``floor_factor * floor``, and
    ``NoiseFloorError`` is raised if fewer than ``min_bins`` bins remain. The interval's standard
    error (``t_interval``) comes from a bootstrap that resamples pairs ``n_boot`` times (``numpy.random.default_rng(seed)``) in the same window;
    with ``groups`` (int ``[n_pairs]``, a label per pair such as the seed of the model it was
    measured on) it resamples groups, then pairs within each (``bootstrap_indices``), so that the
    interval covers the variation between seeds as well as between pairs. ``bins_per_decade``: the
    log bins of t the summary curve is averaged in (docs/definitions.md#fits); ``confidence``: the
    interval's level. Returns a ``PowerLawFit``.
    """
    t, d = _check_curves(t, d)
    _check_summary(summary)
    _check_confidence(confidence)
    if groups is not None:
        groups = _check_groups("groups", groups, d.shape[0] if d.ndim == 2 else 1, "d")
    if floor is not None:  # its type now, its shape and values where the floor is read
        floor = _real("floor", floor)
    if n_boot < 0:
        raise ValueError(f"n_boot must be >= 0, got n_boot = {n_boot!r}")
    if min_bins < 2:
        raise ValueError(f"min_bins must be >= 2 (a line needs two points), got min_bins = {min_bins!r}")
    t_max = t[-1] if t_max is None else t_max
    _check_window(t, t_min, t_max)
    window = (t >= t_min) & (t <= t_max)
    _check_values(t, d, window, np.isfinite, "non-finite")

    floor_t = None if floor is None else _floor_crossing(t, d, t_min, summary, floor, floor_factor)
    truncated = floor_t is not None and floor_t <= t_max
    if truncated:
        window &= t < floor_t
        if not window.any():
            raise NoiseFloorError(
                f"the summary curve of d is already below floor_factor * floor at t = {_py(floor_t)}, "
                f"the start of the window [{_py(t_min)}, {_py(t_max)}]: no window is left above "
                f"the noise floor; refusing to fit"
            )
    # Checked after truncation: below the floor an offset may legitimately underflow to zero.
    _check_values(t, d, window, lambda x: x > 0, "non-positive (log impossible)")

    t_used = t[window]
    _, starts = _log_bins(t_used, t_min, t_used[-1], bins_per_decade)
    n_bins = len(starts)
    if n_bins < min_bins:
        where = f"t in [{_py(t_used[0])}, {_py(t_used[-1])}] holds {n_bins} non-empty bins"
        if truncated:
            raise NoiseFloorError(
                f"the noise floor is reached at t = {_py(floor_t)} (summary curve of d below floor_factor = "
                f"{floor_factor!r} times the floor); the window left, {where}, fewer than "
                f"min_bins = {min_bins}; refusing to fit below the floor"
            )
        raise _BadWindowError(f"window too short: {where}, fewer than min_bins = {min_bins}")

    # Bins average log y (and log t): exact for a power law, see ``binning``'s docstring.
    d_used = d[..., window]
    log_t_bin = _bin_mean(np.log(t_used), starts)
    slope, intercept, r2 = _ols_loglog(log_t_bin, _bin_mean(np.log(summary_curve(d_used, summary)), starts))

    ci = dof = None
    if d.ndim == 2 and d.shape[0] > 1 and n_boot > 0:  # one pair has no interval, not [alpha, alpha]
        boot = _bootstrap_alphas(d_used, log_t_bin, starts, summary, bootstrap_indices(d.shape[0], n_boot, seed, groups))
        units = _units(d.shape[0], groups)
        ci = t_interval(float(-slope), float(_standard_error(boot, units)), units - 1, confidence)
        dof = units - 1

    return PowerLawFit(
        alpha=float(-slope),
        ci=ci,
        prefactor=float(np.exp(intercept)),
        r2=float(r2),
        t_range=(_py(t_used[0]), _py(t_used[-1])),
        n_bins=n_bins,
        floor_t=None if floor_t is None else _py(floor_t),
        summary=summary,
        confidence=float(confidence),
        n_groups=None if groups is None else int(np.unique(groups).size),
        dof=None if dof is None else float(dof),
    )


def _bootstrap_alphas(d_used, log_t_bin, starts, summary, resamples) -> np.ndarray:
    """alpha of each resample of the pairs (rows of ``resamples``) on the binned window: [n_boot]."""
    slopes = np.concatenate([_ols_loglog(log_t_bin, _bin_mean(np.log(curves), starts))[0]
                             for curves in _resampled_curves(d_used, resamples, summary)])
    return -slopes
