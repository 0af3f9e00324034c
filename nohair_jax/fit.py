"""Power-law fits of prompt-pair offset curves, with honest windows and noise floors.

An offset curve is ``d(t) > 0`` at continuation positions ``t = 1..T`` (tokens), measured for
many prompt pairs: an array ``d`` of shape ``[n_pairs, T]`` (or ``[T]`` for one curve). It
decays roughly as ``A t^-alpha``. This module fits ``alpha`` (docs/definitions.md#fits).

The fit window
--------------
``alpha`` depends strongly on where it is measured: on one small trained model the same layer
gave ``alpha = 0.35`` for ``t`` in ``[8, 240]`` and ``alpha = 0.56`` for ``t`` in ``[32, 2048]``.
The curves are not pure power laws (the theory predicts ``(log t)^(L-1) / t``, whose local
exponent drifts with ``t``), so a window is part of the measurement, not a detail. Therefore:

* the window is fixed by default, ``t`` in ``[32, T]``: below ``t ~ 32`` a log-spaced bin holds
  only one or a few integer positions and the curve still carries the transient of the prompt
  boundary, so the first decade would dominate the slope with its least representative points;
* every ``PowerLawFit`` carries the window actually used (``t_range``) next to ``alpha``;
* ``alpha_vs_window`` maps ``alpha`` over many windows and ``local_exponent`` gives
  ``alpha(t)``, so that a window effect is never mistaken for a finding.

How a fit is made
-----------------
The summary curve over pairs (mean, geometric mean or median) is averaged in log-spaced bins of
``t`` (``bins_per_decade`` per decade, edges starting at ``t_min``), then ``log y_bin`` is
regressed on ``log t_bin`` by ordinary least squares. Within a bin the average is taken of
``log y`` and the bin's position is the geometric mean of its ``t``: both are then means of the
same linear function of ``log t`` for a power law, so an exact power law is fitted exactly,
whatever the bins hold. (The arithmetic mean of ``t^-alpha`` over a bin is not
``t_bin^-alpha``, and on an integer grid the mismatch differs from bin to bin, which would bias
``alpha``.) The confidence interval of ``alpha`` is a Student-t interval whose standard error
comes from a bootstrap over pairs in the same window as the point fit (``t_interval``; its
coverage is checked by simulation in ``tests/test_coverage.py``).

The noise floor
---------------
In float32 an offset cannot be measured below roughly ``eps * ||h||``. ``noise_floor_curve``
turns a float32-versus-float64 comparison into an absolute floor ``[T]``; given to
``fit_power_law`` as ``floor``, it ends the window before the first ``t`` where the summary
curve drops below ``floor_factor * floor``, records that ``t`` as ``floor_t``, and refuses
(``NoiseFloorError``) rather than fit a window too short to hold ``min_bins`` bins.

Everything is numpy, float64 throughout.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from nohair_jax.checks import real_array

__all__ = [
    "FitRefused",
    "NoiseFloorError",
    "PowerLawFit",
    "PowerLawTolerance",
    "alpha_table",
    "alphas",
    "fit_from_dict",
    "fit_layers",
    "fit_or_refuse",
    "fit_windows",
    "alpha_vs_window",
    "fit_power_law",
    "local_exponent",
    "log_binned",
    "noise_floor_curve",
    "power_law_tolerance",
    "summary_curve",
    "ExponentRise",
    "local_exponent_rise",
    "quarter_rise",
    "t_interval",
    "bonferroni",
]

_SUMMARIES = ("mean", "geomean", "median")

# A t exactly on a bin edge (t_min * 10**(k / bins_per_decade)) must land in the bin it opens,
# but log10 of it can come out a rounding error short; this slack, far above float64 rounding
# and far below any real gap between positions, puts it where it belongs.
_EDGE_SLACK = 1e-9

# Bootstrap resamples are gathered in chunks of at most this many float64 elements
# (32 MiB), so that n_boot * n_pairs * T never has to fit in memory at once.
_BOOT_CHUNK_ELEMENTS = 1 << 22


class NoiseFloorError(ValueError):
    """The noise floor leaves too short a window to fit; raised instead of fitting below it."""


class _BadWindowError(ValueError):
    """The requested window is empty, reversed, outside the data or holds too few bins."""


class _BadValuesError(ValueError):
    """The curves are non-finite, or not positive where a log is taken, inside the window."""


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


def fit_from_dict(saved: dict) -> PowerLawFit | AlphaDifference | PowerLawTolerance | FitRefused:
    """The result that ``saved``, a ``to_dict()`` of ``PowerLawFit``, ``AlphaDifference``,
    ``PowerLawTolerance``, ``ExponentRise`` or ``FitRefused``, was made from (read back from JSON); keys of a record that holds more than the
    result (the depths a difference is between, say) are left aside.

    Files written before a missing interval was None hold ``[null, null]``: read as None too, so
    that results of earlier runs (reused by ``nohair reproduce``) are judged alike."""
    if "error" in saved:
        return FitRefused(saved["error"])
    if "rise" in saved:
        return ExponentRise(**{**saved, "ci": None if saved["ci"] is None else tuple(saved["ci"]),
                               "t_range": tuple(saved["t_range"])})
    if "deviation" in saved:
        plain = lambda ci: None if ci is None else tuple(ci)  # noqa: E731
        return PowerLawTolerance(**{**{name: saved.get(name, ()) for name in PowerLawTolerance.__dataclass_fields__},
                                    "ci": plain(saved["ci"]), "holdout_ci": plain(saved["holdout_ci"]),
                                    **{name: tuple(saved.get(name, ())) for name in
                                       ("t_range", "t_bin", "residuals", "holdout_residuals")}})
    kind = AlphaDifference if "difference" in saved else PowerLawFit
    values = {name: saved.get(name) for name in kind.__dataclass_fields__}  # records before ``dof`` lack it: None
    ci = values["ci"]
    return kind(**{**values, "ci": None if ci is None or None in ci else tuple(ci), "t_range": tuple(values["t_range"])})


def fit_or_refuse(t, d, **fit_kwargs) -> PowerLawFit | FitRefused:
    """``fit_power_law(t, d, **fit_kwargs)``, or a ``FitRefused`` saying why where the data refuse a
    fit (below the noise floor, too short a window, values a log cannot take); a bad setting raises."""
    try:
        return fit_power_law(t, d, **fit_kwargs)
    except (NoiseFloorError, _BadWindowError, _BadValuesError) as err:
        return FitRefused(str(err))


def difference_or_refuse(t, d_a, d_b, **kwargs) -> AlphaDifference | FitRefused:
    """``alpha_difference(t, d_a, d_b, **kwargs)``, or a ``FitRefused`` where either side's data refuse
    a fit (as ``fit_or_refuse``); a bad setting raises."""
    try:
        return alpha_difference(t, d_a, d_b, **kwargs)
    except (NoiseFloorError, _BadWindowError, _BadValuesError) as err:
        return FitRefused(str(err))


def fit_layers(t, l2, floor=None, *, sliding_window=None, window_layers=None,
               **fit_kwargs) -> list[PowerLawFit | FitRefused]:
    """``fit_or_refuse`` of every layer 1..L of ``l2 [n_pairs, L+1, T]`` (layer 0, the embedding, is
    not fitted); ``floor [L+1, T]`` or None; ``fit_kwargs`` go to every fit (``groups`` for a
    hierarchical interval, say), so that one layer refused does not fail the whole model.

    ``sliding_window`` (tokens) and ``window_layers`` (0-based, None: every layer): the model's window, as
    ``TransformerConfig`` holds it; what it does to the fits of the window layers and of the layers above
    them is then said (``_window_caveat``).
    """
    t, l2 = _check_t(t), _real("l2", l2)
    if l2.ndim != 3 or l2.shape[0] == 0:
        raise ValueError(f"l2 must have shape [n_pairs, L+1, T] with n_pairs >= 1, got shape {l2.shape}")
    _check_last_axis(t, l2, "l2")
    if floor is not None:
        floor = _real("floor", floor)
        if floor.shape != l2.shape[1:]:
            raise ValueError(f"floor must have shape [L+1, T] = {l2.shape[1:]} (as l2), got shape {floor.shape}")
    fits = [fit_or_refuse(t, l2[:, layer], floor=None if floor is None else floor[layer], **fit_kwargs)
            for layer in range(1, l2.shape[1])]
    if sliding_window is None:
        return fits
    windowed = range(1, len(fits) + 1) if window_layers is None else sorted(layer + 1 for layer in window_layers)
    t_max = t[-1] if fit_kwargs.get("t_max") is None else fit_kwargs["t_max"]
    return [_window_caveat(fit, layer, t, l2[:, layer], t_max, sliding_window, windowed) for layer, fit in
            enumerate(fits, start=1)]


def _window_caveat(fit, layer: int, t, d, t_max, width: int, windowed) -> PowerLawFit | FitRefused:
    """``fit`` of the offsets ``d [n_pairs, T]`` at positions ``t [T]`` of ``layer`` (1..L) in a model with a
    sliding window of ``width`` tokens on the layers ``windowed`` (1-based), with what the window does to it;
    ``t_max``: the end of the fit window asked for.

    A window layer's query at continuation position t reads the prompt's last key only while t < width:
    from t = width on that layer sees the prompt only through earlier layers, and the layers above it get
    only that much of it from there. A fit of such a layer, or of one above it, whose window holds t on
    both sides of that point gets a ``caveat`` saying so. Where the layers 1..layer all have the window
    (the first of them, or Mistral's on every layer), each reaches width - 1 positions further back and the
    offset is exactly 0 from t = layer (width - 1) + 1 on: a refused fit whose window reaches there gets that
    as its reason (the data must show it: every pair's offset 0 there)."""
    below = [k for k in windowed if k < layer]
    if isinstance(fit, PowerLawFit):
        low, high = fit.t_range
        if not (layer in windowed or below) or not low < width <= high:
            return fit
        crosses = f"the fit window [{low}, {high}] crosses t = {width}, where the prompt leaves"
        if layer in windowed:
            return dataclasses.replace(fit, caveat=f"{crosses} this layer's {width}-token window: from there on the "
                                                   "layer sees the prompt only through earlier layers")
        layers = f"layer {below[0]}" if len(below) == 1 else f"layers {', '.join(map(str, below))}"
        return dataclasses.replace(fit, caveat=f"{crosses} the {width}-token window of {layers} below: from there on "
                                               f"less of the prompt reaches this layer through {layers}")
    if layer not in windowed or len(below) < layer - 1:
        return fit
    silent = layer * (width - 1) + 1
    if silent > t_max or np.any(np.asarray(d)[..., np.asarray(t) >= silent]):
        return fit
    if layer == 1:
        return FitRefused(f"the prompt is outside this layer's {width}-token window from t = {silent} on: its offset "
                          "is exactly 0 there")
    return FitRefused(f"the prompt is outside the {width}-token windows of layers 1 to {layer} (each reaching "
                      f"{width - 1} positions further back) from t = {silent} on: this layer's offset is exactly 0 there")


def alphas(fits: list[PowerLawFit | FitRefused]) -> list[float | None]:
    """alpha of each of ``fits`` (``PowerLawFit`` or ``FitRefused``), None where it was refused."""
    return [fit.alpha if isinstance(fit, PowerLawFit) else None for fit in fits]


def alpha_table(fits: list[PowerLawFit | FitRefused]) -> np.ndarray:
    """float [len(fits), 3]: alpha, interval low, interval high of each fit; nan where refused or
    where there is no interval (what a figure draws, error bars included)."""
    rows = [(f.alpha, *(f.ci or (np.nan, np.nan))) if isinstance(f, PowerLawFit) else (np.nan,) * 3 for f in fits]
    return np.array(rows, dtype=np.float64).reshape(len(fits), 3)


def fit_windows(fits: list[PowerLawFit | FitRefused]) -> np.ndarray:
    """int [L, 2]: the first and last t each layer's fit used (``t_range``); [0, 0] where it was refused.

    Saved beside the offsets so that anyone can refit the raw curves on the same window.
    """
    windows = [fit.t_range if isinstance(fit, PowerLawFit) else (0, 0) for fit in fits]
    return np.array(windows, dtype=np.int64).reshape(len(fits), 2)


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

    # Bins average log y (and log t): exact for a power law, see the module docstring.
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


def bootstrap_indices(n_pairs: int, n_boot: int, seed: int, groups=None) -> np.ndarray:
    """Resampled pair indices int ``[n_boot, n_pairs]`` (``numpy.random.default_rng(seed)``).

    Without ``groups``: pairs with replacement. With ``groups`` (a label per pair; every group the
    same size): a hierarchical bootstrap, groups with replacement, then pairs with replacement
    within each chosen group.
    """
    rng = np.random.default_rng(seed)
    if groups is None:
        return rng.integers(0, n_pairs, size=(n_boot, n_pairs))
    groups = _check_groups("groups", groups, n_pairs)
    members = np.stack([np.flatnonzero(groups == g) for g in np.unique(groups)])  # [G, size]
    size = members.shape[1]
    chosen = rng.integers(0, len(members), size=(n_boot, len(members)))  # [n_boot, G]
    within = rng.integers(0, size, size=(n_boot, len(members), size))  # [n_boot, G, size]
    return members[chosen[..., None], within].reshape(n_boot, n_pairs)


def _check_groups(name: str, groups, n_pairs: int, of: str = "n_pairs") -> np.ndarray:
    """``groups`` as an integer array ``[n_pairs]`` (a label per pair of ``of``), or ValueError/TypeError naming it."""
    groups = real_array(name, groups)
    if groups.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integer labels (one per pair), got dtype {groups.dtype}")
    if groups.shape != (n_pairs,):
        raise ValueError(f"{name} must hold one label per pair ({of}: {n_pairs}), shape ({n_pairs},), got {groups.shape}")
    sizes = np.unique(groups, return_counts=True)[1]
    if sizes.size == 0:
        raise ValueError(f"{name} is empty: there are no pairs to resample")
    if (sizes != sizes[0]).any():  # the hierarchical bootstrap draws as many pairs from every group
        raise ValueError(f"every group in {name} must hold as many pairs, got sizes {sizes.tolist()}")
    return groups


def _bootstrap_alphas(d_used, log_t_bin, starts, summary, resamples) -> np.ndarray:
    """alpha of each resample of the pairs (rows of ``resamples``) on the binned window: [n_boot]."""
    chunk = max(1, _BOOT_CHUNK_ELEMENTS // d_used.size)
    slopes = np.concatenate([
        _ols_loglog(log_t_bin, _bin_mean(np.log(summary_curve(d_used[idx], summary)), starts))[0]
        for idx in np.split(resamples, range(chunk, len(resamples), chunk))
    ])
    return -slopes


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
    from scipy.stats import t as student_t

    centre, half = (ci[0] + ci[1]) / 2, (ci[1] - ci[0]) / 2
    widen = student_t.ppf(1 - (1 - confidence) / (2 * statements), dof) / student_t.ppf((1 + confidence) / 2, dof)
    return (float(centre - half * widen), float(centre + half * widen))


def t_interval(estimate: float, standard_error: float, dof: float, confidence: float = 0.95) -> tuple[float, float]:
    """``estimate -+ q * standard_error``, ``q`` the Student-t quantile at ``(1 + confidence) / 2`` with
    ``dof`` degrees of freedom (``dof`` = units - 1: pairs, or seeds in a hierarchical bootstrap).

    The intervals of this module are built so (docs/definitions.md#intervals): a percentile bootstrap
    over 8 pairs covers well under its nominal level, while this interval's coverage at the sample
    sizes the project uses is checked by simulation in ``tests/test_coverage.py``.
    """
    from scipy.stats import t as student_t

    _check_confidence(confidence)
    if not dof > 0:
        raise ValueError(f"a t-interval needs dof > 0 (at least two units), got dof = {dof!r}")
    q = float(student_t.ppf((1 + confidence) / 2, dof))
    return (float(estimate - q * standard_error), float(estimate + q * standard_error))


@dataclasses.dataclass(frozen=True)
class AlphaDifference:
    """Result of ``alpha_difference`` or ``paired_alpha_difference``: ``alpha_a - alpha_b`` on one window
    ``t_range``, its t-interval ``ci`` at ``confidence`` (a and b resampled independently, or, paired,
    the same pairs drawn for both; None for ``n_boot = 0``), and both alphas."""

    difference: float
    ci: tuple[float, float] | None
    alpha_a: float
    alpha_b: float
    t_range: tuple[int, int]
    confidence: float
    dof: float | None = None  # the interval's degrees of freedom (Welch-Satterthwaite; paired: units - 1), None without one

    def brief(self, spec: str = "+.2f") -> str:
        """The difference and its interval, ``"+0.12 [+0.03, +0.20]"`` (``PowerLawFit.brief``'s counterpart)."""
        return format(self.difference, spec) + ("" if self.ci is None else f" [{self.ci[0]:{spec}}, {self.ci[1]:{spec}}]")

    def to_dict(self) -> dict:
        ci = None if self.ci is None else list(self.ci)
        return dict(difference=self.difference, ci=ci, alpha_a=self.alpha_a, alpha_b=self.alpha_b,
                    t_range=list(self.t_range), confidence=self.confidence, dof=self.dof)


def alpha_difference(
    t, d_a, d_b, *, t_min=32, t_max=None, floor_a=None, floor_b=None, groups_a=None, groups_b=None,
    n_boot=1000, confidence=0.95, seed=0, bins_per_decade=8, summary="mean",
) -> AlphaDifference:
    """``alpha(d_a) - alpha(d_b)`` of two sets of curves ``[n_a, T]``, ``[n_b, T]`` on a common window.

    Each set is fitted as ``fit_power_law`` would (floors, groups); the window is ``[t_min, t_end]``
    with ``t_end`` the earlier of the two windows' ends, so both alphas are measured on the same
    positions. The interval is a t-interval of the difference (``t_interval``): each side's standard
    error from ``n_boot`` independent resamples of its set (hierarchical where groups are given),
    Welch-Satterthwaite degrees of freedom; a comparison of two conditions as one interval, not two.
    ``floor_a``, ``floor_b`` ([T] or None) and ``groups_a``, ``groups_b`` (int [n_a], [n_b] or None)
    are each side's ``floor`` and ``groups`` of ``fit_power_law``; the other arguments as there.
    """
    _check_confidence(confidence)
    t = _check_t(t)
    common = dict(t_min=t_min, t_max=t_max, bins_per_decade=bins_per_decade, summary=summary, n_boot=0)
    sides, checked = [], []
    for side, d, floor, groups in (("a", d_a, floor_a, groups_a), ("b", d_b, floor_b, groups_b)):  # both, before any fit
        _, d = _check_curves(t, d, f"d_{side}")
        if groups is not None:
            groups = _check_groups(f"groups_{side}", groups, d.shape[0] if d.ndim == 2 else 1, f"d_{side}")
        if floor is not None:
            floor = _real(f"floor_{side}", floor)
        checked.append((side, d, floor, groups))
    for side, d, floor, groups in checked:
        if d.ndim != 2 or d.shape[0] < 2:
            raise _BadValuesError(f"d_{side} must hold at least two curves [n_pairs >= 2, T], got shape {d.shape}")
    for side, d, floor, groups in checked:
        try:
            fit = fit_power_law(t, d, floor=floor, **common)
        except _BadWindowError:
            raise
        except (ValueError, TypeError) as err:  # the curves' values or the floor: say which side's
            raise type(err)(f"side {side} (d_{side}, floor_{side}): {err}") from None
        sides.append((d, groups, fit))
    (d_a, groups_a, fit_a), (d_b, groups_b, fit_b) = sides
    t_end = min(fit_a.t_range[1], fit_b.t_range[1])
    window = (t >= t_min) & (t <= t_end)
    _, starts = _log_bins(t[window], t_min, t_end, bins_per_decade)
    log_t_bin = _bin_mean(np.log(t[window]), starts)
    fitted, boots = [], []
    for k, (d, groups) in enumerate(((d_a, groups_a), (d_b, groups_b))):
        d = d[..., window]
        slope, _, _ = _ols_loglog(log_t_bin, _bin_mean(np.log(summary_curve(d, summary)), starts))
        fitted.append(float(-slope))
        boots.append(_bootstrap_alphas(d, log_t_bin, starts, summary, bootstrap_indices(d.shape[0], n_boot, seed + k, groups)))
    ci = dof = None
    if n_boot > 0:
        units = [_units(d.shape[0], g) for d, g in ((d_a, groups_a), (d_b, groups_b))]
        se = [float(_standard_error(b, n)) for b, n in zip(boots, units)]
        dof = _welch_dof(se, [n - 1 for n in units])
        ci = t_interval(fitted[0] - fitted[1], float(np.hypot(*se)), dof, confidence)
    return AlphaDifference(difference=fitted[0] - fitted[1], ci=ci, alpha_a=fitted[0], alpha_b=fitted[1],
                           t_range=(_py(t[window][0]), _py(t_end)), confidence=float(confidence), dof=dof)


def paired_alpha_difference(
    t, d_a, d_b, *, t_min=32, t_max=None, floor_a=None, floor_b=None, groups=None,
    n_boot=1000, confidence=0.95, seed=0, bins_per_decade=8, summary="mean",
) -> AlphaDifference:
    """``alpha(d_a) - alpha(d_b)`` of one set of pairs measured under two conditions: row i of
    ``d_a [n_pairs, T]`` and row i of ``d_b [n_pairs, T]`` are the same prompt pair (same texts, same
    seed, same order). The alphas and their common window are ``alpha_difference``'s.

    The interval is paired, and so is the ``AlphaDifference`` returned: each of ``n_boot`` resamples
    draws one set of pair indices (``group_indices``: pairs, or with ``groups``, int ``[n_pairs]`` a
    label per pair such as its seed, whole groups) and fits both sides on it, so that what a pair adds
    to both alphas alike cancels in their difference; a t-interval (``t_interval``) with the standard
    error of the resampled differences and ``n_pairs - 1`` degrees of freedom (``n_groups - 1`` over
    several groups), not Welch's. Its coverage at the sizes the claims use is checked by simulation
    (``tests/test_coverage.py``). Sides holding different numbers of curves are not one set of pairs:
    ValueError. ``floor_a``, ``floor_b``: each side's noise floor ``[T]`` or None; the other arguments
    as ``fit_power_law``'s.
    """
    t = _check_t(t)
    _, d_a = _check_curves(t, d_a, "d_a")
    _, d_b = _check_curves(t, d_b, "d_b")
    if d_a.shape[:-1] != d_b.shape[:-1]:
        raise ValueError("d_a and d_b must hold the same pairs, one curve each in the same order: got shapes "
                         f"{d_a.shape} and {d_b.shape}")
    if n_boot < 0:
        raise ValueError(f"n_boot must be >= 0, got n_boot = {n_boot!r}")
    if groups is not None:
        groups = _check_groups("groups", groups, d_a.shape[0] if d_a.ndim == 2 else 1, "d_a and d_b")
    point = alpha_difference(t, d_a, d_b, t_min=t_min, t_max=t_max, floor_a=floor_a, floor_b=floor_b, groups_a=groups,
                             groups_b=groups, n_boot=0, confidence=confidence, bins_per_decade=bins_per_decade,
                             summary=summary)
    if n_boot == 0:
        return point
    window = (t >= t_min) & (t <= point.t_range[1])
    _, starts = _log_bins(t[window], t_min, point.t_range[1], bins_per_decade)
    log_t_bin = _bin_mean(np.log(t[window]), starts)
    resamples = group_indices(d_a.shape[0], n_boot, seed, groups)  # one draw for both sides: the pairing
    boot = (_bootstrap_alphas(d_a[:, window], log_t_bin, starts, summary, resamples)
            - _bootstrap_alphas(d_b[:, window], log_t_bin, starts, summary, resamples))
    units = _units(d_a.shape[0], groups)
    ci = t_interval(point.difference, float(_standard_error(boot, units)), units - 1, confidence)
    return dataclasses.replace(point, ci=ci, dof=float(units - 1))


def group_indices(n_pairs: int, n_boot: int, seed: int, groups=None) -> np.ndarray:
    """Resampled pair indices int ``[n_boot, n_pairs]`` (``numpy.random.default_rng(seed)``) for an
    interval over independent units: with several ``groups`` (a label per pair, every group the same
    size) whole groups with replacement, each with all its pairs; otherwise pairs with replacement.

    Unlike ``bootstrap_indices``, a chosen group's pairs are not resampled again: drawing them again
    counts their spread twice, once in the spread of the group means and once more within, and the
    paired interval over 3 seeds of 4 pairs then covered 99 to 100 % in simulation instead of 95 %
    (``tests/test_coverage.py``; whole groups: 93 to 97 %)."""
    rng = np.random.default_rng(seed)
    if groups is not None:
        groups = _check_groups("groups", groups, n_pairs)
    if groups is None or np.unique(groups).size == 1:
        return rng.integers(0, n_pairs, size=(n_boot, n_pairs))
    members = np.stack([np.flatnonzero(groups == g) for g in np.unique(groups)])  # [G, size]
    return members[rng.integers(0, len(members), size=(n_boot, len(members)))].reshape(n_boot, n_pairs)


def paired_difference_or_refuse(t, d_a, d_b, **kwargs) -> AlphaDifference | FitRefused:
    """``paired_alpha_difference(t, d_a, d_b, **kwargs)``, or a ``FitRefused`` where either side's data
    refuse a fit (as ``difference_or_refuse``); a bad setting, unequal sides included, raises."""
    try:
        return paired_alpha_difference(t, d_a, d_b, **kwargs)
    except (NoiseFloorError, _BadWindowError, _BadValuesError) as err:
        return FitRefused(str(err))


DECAY_LAWS = ("power", "log_power", "exponential", "stretched_exp")
_STRETCH_GRID = np.linspace(0.02, 1.0, 50)


@dataclasses.dataclass(frozen=True)
class PowerLawTolerance:
    """Result of ``power_law_tolerance``: how far a curve is from a power law on one window.

    deviation: the largest ``|log residual|`` of the best power law over the bins of the log-binned
    summary curve (natural log: 0.10 is about 10 %); ci: its interval over pairs. holdout: the
    largest ``|log residual|`` on the window's second half (in ``log t``) of the power law fitted to
    its first half, a prediction; holdout_ci: its interval. Intervals (``_largest_abs_interval``):
    from per-bin t-intervals of the residuals, bootstrap standard errors; the upper end at 95 % per
    bin, the lower end at 95 % over all bins at once; None for one curve. alpha: the best power
    law's exponent. decades: ``log10(t_end / t_start)`` of the window. cv_error: law (``DECAY_LAWS``
    and every reference shape given) -> root-mean-square log error of the law fitted to one half of
    the pairs against the binned mean curve of the other half (even against odd pairs, both ways);
    None with fewer than 4 curves. t_bin: the bins' positions (geometric mean of their t);
    residuals: the log residual at each bin; holdout_residuals: the prediction's, at the last
    ``len(holdout_residuals)`` bins (what a figure draws). holdout_ratio: ``holdout / deviation`` of a
    unit log-log curvature on these bins (``curvature_ratio``), the factor that turns a tolerance on
    ``deviation`` into the same tolerance on ``holdout`` (``within``); a record saved without it gets
    it from ``t_bin`` (the continuum's 13/4 when it has no bins either).

    Why one tolerance scaled, not two equal ones (docs/power_law_calibration.md). "Approximately a
    power law" is used in the papers as one exponent fitted over a window: a curve is approximately
    a power law on a window when one exponent describes it there within the stated tolerance,
    whatever law generated it (so ``P / (P + t)`` far past ``t = P``, ``1 / log t`` or
    ``(log t)^k / t`` may be, on a window, and an exponential is not). Both statistics measure how
    far the curve is from that one exponent, but in different units: for the departure every
    smooth family shows first, a local exponent that drifts linearly in ``log t`` (``log d``
    quadratic in ``log t``, curvature ``c`` over a window of width ``W``), the best power law's
    largest residual is ``c W^2 / 12`` while the first half's prediction misses the end of the
    second by ``13 c W^2 / 24``, 13/4 times as much (on a window's actual bins, unequal in content
    and split unevenly, the factor differs: 3.71 on ``[32, 2048]`` at 8 bins per decade). Holding
    both to one number rejected curves the residual calls within it (1 / log t, a power law with a
    3 % wiggle) and so made the prediction, not the stated tolerance, decide. Scaled by the exact
    ratio on the same bins, the two agree on what "within" means for that departure, and the
    prediction still catches what a best fit hides: a knee (a change of exponent in the window)
    misses by 4 times its best fit's residual, beyond the ratio. The other choice, a tolerance on
    the local exponent's drift per decade, needs a threshold of its own (derived from the same
    quadratic, so no new information) and differences of binned logs, whose noise grows as the bins
    narrow; these two statistics keep the stated 0.10 as the only number and their intervals
    (``tests/test_coverage.py``).
    """

    deviation: float
    ci: tuple[float, float] | None
    holdout: float
    holdout_ci: tuple[float, float] | None
    alpha: float
    decades: float
    t_range: tuple[int, int]
    n_bins: int
    cv_error: dict | None
    t_bin: tuple[float, ...] = ()
    residuals: tuple[float, ...] = ()
    holdout_residuals: tuple[float, ...] = ()
    holdout_ratio: float | None = None

    def __post_init__(self):
        if self.holdout_ratio in (None, ()):  # () from ``fit_from_dict`` of a record saved before the field
            ratio = (self.curvature_ratio(np.log(np.asarray(self.t_bin, dtype=np.float64))) if len(self.t_bin) >= 3
                     else 13 / 4)
            object.__setattr__(self, "holdout_ratio", float(ratio))

    @staticmethod
    def curvature_ratio(log_t_bin, curvature=None) -> float:
        """``holdout / deviation`` of a unit log-log curvature on bins at ``log t = log_t_bin [n]``
        (the window's first half: ``log t <= (first + last) / 2``, as ``power_law_tolerance`` splits
        it): the best power law's largest ``|log residual|`` and its first half's prediction error on
        the second, both of ``log d = (log t)^2`` (any ``c (log t - a)^2`` has the same ratio: the
        linear part is fitted away exactly). ``curvature [n]``: the bins' mean of ``(log t)^2`` over
        the positions they hold; ``log_t_bin ** 2`` by default (a record's bins only)."""
        x = np.asarray(log_t_bin, dtype=np.float64)
        q = x**2 if curvature is None else np.asarray(curvature, dtype=np.float64)
        first = x <= (x[0] + x[-1]) / 2
        slope, intercept, _ = _ols_loglog(x, q)
        whole = np.abs(q - slope * x - intercept).max()
        slope, intercept, _ = _ols_loglog(x[first], q[first])
        return float(np.abs(q[~first] - slope * x[~first] - intercept).max() / whole)

    def holdout_tolerance(self, tolerance: float) -> float:
        """The tolerance on ``holdout`` that says what ``tolerance`` says on ``deviation``:
        ``tolerance * holdout_ratio``."""
        return tolerance * self.holdout_ratio

    def within(self, tolerance: float) -> bool | None:
        """True when the deviation's interval ends (the value itself without an interval) at or below
        ``tolerance`` and the prediction's at or below ``holdout_tolerance(tolerance)``; False when
        either lower end is above its tolerance; None when an interval straddles it."""
        limits = (tolerance, self.holdout_tolerance(tolerance))
        hi = [self.deviation if self.ci is None else self.ci[1], self.holdout if self.holdout_ci is None else self.holdout_ci[1]]
        lo = [self.deviation if self.ci is None else self.ci[0], self.holdout if self.holdout_ci is None else self.holdout_ci[0]]
        if all(h <= limit for h, limit in zip(hi, limits)):
            return True
        return False if any(low > limit for low, limit in zip(lo, limits)) else None

    def to_dict(self) -> dict:
        plain = lambda ci: None if ci is None else list(ci)  # noqa: E731
        return dict(deviation=self.deviation, ci=plain(self.ci), holdout=self.holdout, holdout_ci=plain(self.holdout_ci),
                    alpha=self.alpha, decades=self.decades, t_range=list(self.t_range), n_bins=self.n_bins,
                    cv_error=self.cv_error, t_bin=list(self.t_bin), residuals=list(self.residuals),
                    holdout_residuals=list(self.holdout_residuals), holdout_ratio=self.holdout_ratio)


def power_law_tolerance(t, d, *, t_min=32, t_max=None, bins_per_decade=8, summary="mean", n_boot=1000,
                        confidence=0.95, seed=0, groups=None, shapes=None, cross_validate=True) -> PowerLawTolerance:
    """How closely ``d(t)`` follows its best power law on ``[t_min, t_max]``: "approximately a power
    law" judged at a stated tolerance (``PowerLawTolerance.within``), not by which law fits best.

    t: ``[T]``; d: ``[n_pairs, T]`` or ``[T]``, positive in the window; binned as ``fit_power_law``
    bins (at least 6 bins). The deviations shrink, not grow, as pairs are added to a curve that is a
    power law within the tolerance, so more data never turns "within" into "beyond". Intervals as
    ``fit_power_law``'s (``groups`` for a hierarchical bootstrap). ``shapes``: name -> reference curve
    ``[T]`` (the relay model's offsets) added to the alternatives of ``cv_error`` as ``c * shape``;
    ``t_min >= 2`` (the log-power law needs ``log t > 0``). The record's ``holdout_ratio`` is computed
    on these bins (the mean of ``(log t)^2`` over each bin's positions): the prediction is held to
    the tolerance times it (``PowerLawTolerance``'s docstring says why). ``cross_validate=False``
    leaves ``cv_error`` None (the verdict does not read it; half the time of a call). The verdicts'
    error rates on curves of known verdict, at 8 and 16 pairs: docs/power_law_calibration.md.
    """
    t, d = _check_curves(t, d)
    _check_summary(summary)
    _check_confidence(confidence)
    if groups is not None:
        groups = _check_groups("groups", groups, d.shape[0] if d.ndim == 2 else 1, "d")
    shapes = {name: _check_reference(name, shape, t) for name, shape in (shapes or {}).items()}
    t_max = t[-1] if t_max is None else t_max
    _check_window(t, t_min, t_max)
    if t_min < 2:
        raise ValueError(f"t_min must be >= 2 for the log-power law (log t > 0), got t_min = {t_min!r}")
    window = (t >= t_min) & (t <= t_max)
    _check_values(t, d, window, lambda x: np.isfinite(x) & (x > 0), "non-positive or non-finite")
    for name, shape in shapes.items():
        _check_values(t, shape, window, lambda x: np.isfinite(x) & (x > 0), "non-positive or non-finite",
                      f"shapes[{name!r}]")
    t_used = t[window]
    _, starts = _log_bins(t_used, t_min, t_used[-1], bins_per_decade)
    if len(starts) < 6:
        raise _BadWindowError(f"window t in [{_py(t_used[0])}, {_py(t_used[-1])}] holds {len(starts)} bins; 6 or more are needed")
    x = _bin_mean(np.log(t_used), starts)  # log t per bin
    first = x <= (x[0] + x[-1]) / 2
    d_used = d[..., window]

    def residuals(curves: np.ndarray) -> np.ndarray:
        """Log residuals of binned log curves ``[..., n_bins]`` from their best power law over the
        window, then on the window's second half from the power law fitted to its first half:
        ``[..., n_bins + n_second]``."""
        slope, intercept, _ = _ols_loglog(x, curves)
        whole = curves - slope[..., None] * x - intercept[..., None]
        slope, intercept, _ = _ols_loglog(x[first], curves[..., first])
        ahead = curves[..., ~first] - slope[..., None] * x[~first] - intercept[..., None]
        return np.concatenate([whole, ahead], axis=-1)

    y = _bin_mean(np.log(summary_curve(d_used, summary)), starts)
    r = residuals(y)
    parts = (slice(0, len(x)), slice(len(x), None))  # the whole window's residuals; the prediction's
    deviation, holdout = (float(np.abs(r[part]).max()) for part in parts)
    ci = holdout_ci = None
    if d.ndim == 2 and d.shape[0] > 1 and n_boot > 0:
        resamples = bootstrap_indices(d.shape[0], n_boot, seed, groups)

        def resampled(idx: np.ndarray) -> np.ndarray:
            """Summary curves of the resamples ``idx [b, n_pairs]``: ``[b, positions]``; the mean as each
            pair's count in a resample times its curve (one product, no ``[b, n_pairs, positions]`` copy;
            einsum, not a threaded BLAS product, which costs ten times as much on a busy small machine)."""
            if summary != "mean":
                return summary_curve(d_used[idx], summary)
            counts = np.zeros((len(idx), d.shape[0]))
            np.add.at(counts, (np.arange(len(idx))[:, None], idx), 1.0)
            return np.einsum("bn,nt->bt", counts, d_used) / d.shape[0]

        chunk = max(1, _BOOT_CHUNK_ELEMENTS // (d_used.shape[-1] if summary == "mean" else d_used.size))
        boot = np.concatenate([residuals(_bin_mean(np.log(resampled(idx)), starts))
                               for idx in np.split(resamples, range(chunk, len(resamples), chunk))])
        units = _units(d.shape[0], groups)
        se = _standard_error(boot, units)  # per bin
        ci, holdout_ci = (_largest_abs_interval(r[part], se[part], units - 1, confidence) for part in parts)
    cv_error = None
    if cross_validate and d.ndim == 2 and d.shape[0] >= 4:
        binned = {name: _bin_mean(np.log(shape[window]), starts) for name, shape in shapes.items()}
        halves = [_bin_mean(np.log(summary_curve(d_used[k::2], summary)), starts) for k in (0, 1)]
        errors = [{law: float(np.sqrt(np.mean((pred - held) ** 2))) for law, pred in _decay_law_fits(x, fitted, binned).items()}
                  for fitted, held in ((halves[0], halves[1]), (halves[1], halves[0]))]
        cv_error = {law: (errors[0][law] + errors[1][law]) / 2 for law in errors[0]}
    slope, _, _ = _ols_loglog(x, y)
    return PowerLawTolerance(
        deviation=deviation, ci=ci, holdout=holdout, holdout_ci=holdout_ci, alpha=float(-slope),
        decades=float(np.log10(t_used[-1] / t_used[0])), t_range=(_py(t_used[0]), _py(t_used[-1])),
        n_bins=len(starts), cv_error=cv_error, t_bin=tuple(np.exp(x).tolist()), residuals=tuple(r[parts[0]].tolist()),
        holdout_residuals=tuple(r[parts[1]].tolist()),
        holdout_ratio=PowerLawTolerance.curvature_ratio(x, _bin_mean(np.log(t_used) ** 2, starts)),
    )


def _largest_abs_interval(values: np.ndarray, se: np.ndarray, dof: float, confidence: float) -> tuple[float, float]:
    """An interval for ``max_b |v_b|`` from per-bin t-intervals ``v_b -+ q se_b`` (``n`` bins).

    The upper end is the largest upper end of ``|v_b|`` over the bins with each interval at
    ``confidence``: at or below a tolerance, every bin lies within it, each at 95 % (all must hold,
    so no correction is needed). The lower end is the largest lower end of ``|v_b|`` with each
    interval widened for the ``n`` bins (Bonferroni): above a tolerance, some bin lies beyond it with
    95 % confidence over all bins at once. A largest |residual| itself is pushed up by noise; these
    per-bin intervals are not (their coverage: ``tests/test_coverage.py``)."""
    from scipy.stats import t as student_t

    def abs_bounds(q: float) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = values - q * se, values + q * se
        straddles = (lo <= 0) & (hi >= 0)
        return np.where(straddles, 0.0, np.minimum(np.abs(lo), np.abs(hi))), np.maximum(np.abs(lo), np.abs(hi))

    each = student_t.ppf((1 + confidence) / 2, dof)
    every = student_t.ppf(1 - (1 - confidence) / (2 * values.size), dof)
    return float(abs_bounds(every)[0].max()), float(abs_bounds(each)[1].max())


def _decay_law_fits(x: np.ndarray, y: np.ndarray, shapes: dict) -> dict:
    """Each law of ``DECAY_LAWS`` (and ``c * shape`` for every binned log ``shapes[name]``) fitted by
    least squares to the binned log curve ``y [n]`` at ``x = log t [n]``: law -> its fitted log curve.

    ``power`` ``c t^-alpha``; ``log_power`` ``c (log t)^k / t`` (the bound's shape); ``exponential``
    ``c e^(-a t)``; ``stretched_exp`` ``c e^(-a t^beta)``, beta on a grid in (0, 1]."""
    ones, t_bin = np.ones_like(x), np.exp(x)

    def linear(features: list[np.ndarray], target: np.ndarray) -> tuple[float, np.ndarray]:
        design = np.stack(features, axis=1)
        coef, *_ = np.linalg.lstsq(design, target, rcond=None)
        fitted = design @ coef
        return float(np.sum((fitted - target) ** 2)), fitted

    fits = {"power": linear([ones, -x], y)[1], "log_power": linear([ones, np.log(x)], y + x)[1] - x,
            "exponential": linear([ones, -t_bin], y)[1],
            "stretched_exp": min((linear([ones, -t_bin**beta], y) for beta in _STRETCH_GRID), key=lambda r: r[0])[1]}
    fits.update({name: linear([ones], y - shape)[1] + shape for name, shape in shapes.items()})
    return fits


def local_exponent(t, d, *, bins_per_decade=8, summary="mean", t_min=1, t_max=None) -> tuple[np.ndarray, np.ndarray]:
    """Local exponent ``alpha(t) = -dlog d / dlog t`` on a log-spaced grid.

    t: ``[T]``; d: ``[n_pairs, T]`` or ``[T]``, finite and ``> 0`` in ``[t_min, t_max]``. The
    summary curve is log-binned as in ``fit_power_law``; differences of ``log y_bin`` against
    ``log t_bin`` between neighbouring bins are centred at their geometric midpoint. Returns
    ``t_grid [n_bins - 1]`` (positions) and ``alpha_t [n_bins - 1]`` (dimensionless).
    """
    t, d = _check_curves(t, d)
    t_max = t[-1] if t_max is None else t_max
    _check_window(t, t_min, t_max)
    window = (t >= t_min) & (t <= t_max)
    _check_values(t, d, window, np.isfinite, "non-finite")
    _check_values(t, d, window, lambda x: x > 0, "non-positive (log impossible)")
    _, starts = _log_bins(t[window], t_min, t_max, bins_per_decade)
    if len(starts) < 2:
        raise _BadWindowError(f"window [{_py(t_min)}, {_py(t_max)}] holds fewer than 2 bins")
    log_t = _bin_mean(np.log(t[window]), starts)
    log_y = _bin_mean(np.log(summary_curve(d[..., window], summary)), starts)
    return np.exp((log_t[1:] + log_t[:-1]) / 2), -np.diff(log_y) / np.diff(log_t)


def quarter_rise(exponents) -> float:
    """The mean of the last quarter of ``exponents``, local-exponent curves ``[..., n]``, minus the mean of their first
    quarter (``max(1, n // 4)`` points each): how much the exponent rises across the window."""
    exponents = _real("exponents", exponents)
    if exponents.ndim == 0 or exponents.shape[-1] == 0:
        raise ValueError(f"exponents must have shape [..., n] with n >= 1, got shape {exponents.shape}")
    k = max(1, exponents.shape[-1] // 4)
    return exponents[..., -k:].mean(-1) - exponents[..., :k].mean(-1)


@dataclasses.dataclass(frozen=True)
class ExponentRise:
    """Result of ``local_exponent_rise``: ``rise`` = ``last - first``, the mean local exponent over
    the last quarter of the log bins minus over the first quarter; its t-interval ``ci`` over pairs
    at ``confidence`` with ``dof`` degrees of freedom (bootstrap standard error; None for one curve);
    ``t_range``: the first and last point of the local exponent's grid (positions)."""

    rise: float
    ci: tuple[float, float] | None
    first: float
    last: float
    t_range: tuple[float, float]
    confidence: float
    dof: float | None

    def brief(self, spec: str = "+.2f") -> str:
        """The rise and its interval, ``"+0.52 [+0.40, +0.61]"``."""
        return format(self.rise, spec) + ("" if self.ci is None else f" [{self.ci[0]:{spec}}, {self.ci[1]:{spec}}]")

    def to_dict(self) -> dict:
        return dict(rise=self.rise, ci=None if self.ci is None else list(self.ci), first=self.first, last=self.last,
                    t_range=list(self.t_range), confidence=self.confidence, dof=self.dof)


def local_exponent_rise(t, d, *, t_min=1, t_max=None, bins_per_decade=8, n_boot=1000, confidence=0.95, seed=0,
                        groups=None) -> ExponentRise:
    """How much the local exponent of the mean curve of ``d [n_pairs, T]`` (or ``[T]``) rises from the
    first to the last quarter of its log bins on ``[t_min, t_max]`` (``local_exponent``, ``quarter_rise``),
    with a t-interval over pairs (``groups``: seeds, then pairs, as ``fit_power_law``)."""
    t, d = _check_curves(t, d)
    _check_confidence(confidence)
    if groups is not None:
        groups = _check_groups("groups", groups, d.shape[0] if d.ndim == 2 else 1, "d")
    t_max = t[-1] if t_max is None else t_max
    t_grid, exponents = local_exponent(t, d, bins_per_decade=bins_per_decade, t_min=t_min, t_max=t_max)
    rise, first = float(quarter_rise(exponents)), float(exponents[: max(1, exponents.size // 4)].mean())
    ci = dof = None
    if d.ndim == 2 and d.shape[0] > 1 and n_boot > 0:
        window = (t >= t_min) & (t <= t_max)
        _, starts = _log_bins(t[window], t_min, t_max, bins_per_decade)
        log_t = _bin_mean(np.log(t[window]), starts)
        resamples, chunk = bootstrap_indices(d.shape[0], n_boot, seed, groups), max(1, _BOOT_CHUNK_ELEMENTS // d.size)
        boot = np.concatenate([quarter_rise(-np.diff(_bin_mean(np.log(d[idx][..., window].mean(-2)), starts)) / np.diff(log_t))
                               for idx in np.split(resamples, range(chunk, n_boot, chunk))])
        units = _units(d.shape[0], groups)
        dof = units - 1
        ci = t_interval(rise, float(_standard_error(boot, units)), dof, confidence)
    return ExponentRise(rise=rise, ci=ci, first=first, last=first + rise, t_range=(_py(t_grid[0]), _py(t_grid[-1])),
                        confidence=float(confidence), dof=None if dof is None else float(dof))


def alpha_vs_window(t, d, t_mins, t_maxs, **fit_kwargs) -> np.ndarray:
    """``alpha`` of ``fit_power_law`` for every window: ``[len(t_mins), len(t_maxs)]``.

    nan where the window is invalid (reversed, outside the data), too short for ``min_bins``,
    or cut short by the noise floor; other errors (bad ``d``, bad arguments) still raise.
    ``fit_kwargs`` go to ``fit_power_law``; the bootstrap is off (``n_boot = 0``) for speed.
    """
    t_mins, t_maxs = (_real(name, v) for name, v in (("t_mins", t_mins), ("t_maxs", t_maxs)))
    for name, v in (("t_mins", t_mins), ("t_maxs", t_maxs)):
        if v.ndim != 1:
            raise ValueError(f"{name} must be a list of window edges [k], got shape {v.shape}")
    fit_kwargs = {**fit_kwargs, "n_boot": 0}
    table = np.full((len(t_mins), len(t_maxs)), np.nan)
    for i, lo in enumerate(t_mins):
        for j, hi in enumerate(t_maxs):
            try:
                table[i, j] = fit_power_law(t, d, t_min=lo, t_max=hi, **fit_kwargs).alpha
            except (_BadWindowError, NoiseFloorError):
                pass  # an unusable window is a nan in the map, not a failure of the map
    return table


@dataclasses.dataclass(frozen=True)
class HalfLife:
    """Result of ``kl_half_life``: how many tokens the prompt's effect on the next-token
    distribution lasts, two ways, each with a bootstrap interval over pairs.

    t: the half-life, the centre (geometric mean of t) of the first log bin after the peak bin
    whose mean KL is at most half the peak's; None if it never halves up to T. t_below: the first
    bin at or after the peak whose mean KL is at most ``threshold`` nats; None if never.
    ci, ci_below: (lo, hi) over resamples of the pairs, None for one pair (no interval exists) or
    ``n_boot = 0``; a resample that never gets there counts as T, so ``hi == T`` reads "at least T".
    peak_t, kl_peak: where the binned mean KL is largest, and its value (nats). last_bin_t: the
    centre of the last log bin (a position there may lie beyond T: the window ends in that bin).
    ``str()`` reads it in one line, rounded, saying where a position sits at the window's edge.
    """

    t: float | None
    ci: tuple[float, float] | None
    t_below: float | None
    ci_below: tuple[float, float] | None
    threshold: float
    peak_t: float
    kl_peak: float
    length: int
    n_pairs: int
    confidence: float = 0.95
    last_bin_t: float | None = None

    def to_dict(self) -> dict:
        plain = lambda ci: None if ci is None else list(ci)  # noqa: E731
        return dict(t=self.t, ci=plain(self.ci), t_below=self.t_below, ci_below=plain(self.ci_below),
                    threshold=self.threshold, peak_t=self.peak_t, kl_peak=self.kl_peak, length=self.length,
                    n_pairs=self.n_pairs, confidence=self.confidence, last_bin_t=self.last_bin_t)

    @classmethod
    def from_dict(cls, saved: dict) -> "HalfLife":
        """The ``HalfLife`` a ``to_dict()`` was made from (read back from JSON)."""
        return cls(**{k: tuple(v) if k.startswith("ci") and v is not None else v for k, v in saved.items()})

    def _where(self, t: float | None, ci: tuple[float, float] | None) -> str:
        text = f"not by T = {self.length}" if t is None else f"by t = {t:.0f}"
        if ci is not None:
            text += f" [{ci[0]:.0f}, " + (f">= {self.length}]" if ci[1] >= self.length else f"{ci[1]:.0f}]")
        edge = self.last_bin_t is not None and any(v is not None and v >= self.last_bin_t for v in (t, ci and ci[1]))
        return text + (" (in the window's last bin: measure longer to place it)" if edge else "")

    def __str__(self) -> str:
        intervals = ("no interval with one pair" if self.ci is None
                     else f"{self.confidence:.0%} intervals over {self.n_pairs} pairs")
        return (f"next-token KL: peak {self.kl_peak:.3g} nats at t = {self.peak_t:.0f}; half of it "
                f"{self._where(self.t, self.ci)}; below {self.threshold:g} nats "
                f"{self._where(self.t_below, self.ci_below)} ({intervals})")


def kl_half_life(kl, *, t=None, threshold=0.01, bins_per_decade=8, n_boot=1000, confidence=0.95, seed=0) -> HalfLife:
    """The prompt half-life of next-token KL curves ``kl [n_pairs, K]`` (nats) at positions ``t``
    int [K], increasing from 1 (None: every t = 1..K; ``Offsets.kl_t`` for a sparse measurement).

    The mean over pairs is averaged in log-spaced bins of t (edges from t = 1, ``bins_per_decade``
    per decade). From the bin where it peaks (the first tokens after a prompt may be template
    tokens that both prompts predict alike), the half-life is the first bin whose mean is at most
    half the peak's, and ``t_below`` the first whose mean is at most ``threshold`` nats. The
    intervals (level ``confidence``) are percentiles of ``n_boot`` resamples of the pairs
    (``numpy.random.default_rng(seed)``). Returns a ``HalfLife``.
    """
    kl = _real("kl", kl)
    if kl.ndim != 2 or kl.shape[0] < 1 or kl.shape[1] < 2:
        raise ValueError(f"kl must have shape [n_pairs, T] with n_pairs >= 1 and T >= 2, got {kl.shape}")
    t = np.arange(1, kl.shape[1] + 1) if t is None else _check_t(t)
    _check_last_axis(t, kl, "kl")
    if not np.isfinite(kl).all():
        raise ValueError("kl holds non-finite values")
    if not threshold > 0:
        raise ValueError(f"threshold must be > 0 nats, got {threshold!r}")
    length = int(t[-1])
    t_bin, kl_bin = log_binned(t, kl, t_min=1, t_max=length, bins_per_decade=bins_per_decade)

    def crossings(curve: np.ndarray) -> tuple[float | None, float | None]:
        peak = int(np.argmax(curve))
        after = curve[peak:]
        first = lambda mask: None if not mask.any() else float(t_bin[peak + np.argmax(mask)])  # noqa: E731
        return first(after <= 0.5 * after[0]), first(after <= threshold)

    mean = kl_bin.mean(0)
    half, below = crossings(mean)
    ci = ci_below = None
    if kl.shape[0] > 1 and n_boot > 0:
        idx = np.random.default_rng(seed).integers(0, kl.shape[0], size=(n_boot, kl.shape[0]))
        found = np.array([[length if v is None else v for v in crossings(kl_bin[i].mean(0))] for i in idx])
        q = [(1 - confidence) / 2, (1 + confidence) / 2]
        ci, ci_below = (tuple(float(v) for v in np.quantile(found[:, k], q)) for k in (0, 1))
    peak = int(np.argmax(mean))
    return HalfLife(t=half, ci=ci, t_below=below, ci_below=ci_below, threshold=float(threshold),
                    peak_t=float(t_bin[peak]), kl_peak=float(mean[peak]), length=length, n_pairs=kl.shape[0],
                    confidence=float(confidence), last_bin_t=float(t_bin[-1]))


def noise_floor_curve(d_low, d_ref, *, bins_per_decade=8) -> np.ndarray:
    """Absolute noise floor ``[T]`` from the same offsets in low (float32) and float64 precision.

    d_low, d_ref: ``[n_pairs, T]`` or ``[T]``, positions ``t = 1..T``. The measured error
    ``|d_low - d_ref|``, max over pairs, is turned into an upper envelope: the max within each
    log-spaced bin of ``t`` (edges ``10**(k / bins_per_decade)``), broadcast back to every ``t``
    of the bin. Units of ``d``.
    """
    d_low, d_ref = _real("d_low", d_low), _real("d_ref", d_ref)
    if d_low.shape != d_ref.shape or d_low.ndim not in (1, 2) or 0 in d_low.shape:
        raise ValueError(
            f"d_low and d_ref must share a shape [n_pairs, T] or [T] with n_pairs, T >= 1, got {d_low.shape} and {d_ref.shape}"
        )
    err = np.abs(d_low - d_ref)
    if not np.isfinite(err).all():
        raise ValueError("d_low or d_ref holds non-finite values; the floor cannot be measured")
    err = err.reshape(-1, err.shape[-1]).max(axis=0)
    _, starts = _log_bins(np.arange(1.0, err.size + 1), 1.0, err.size, bins_per_decade)
    # Bin by bin rather than a running max: the floor may fall as well as rise with t.
    return np.repeat(np.maximum.reduceat(err, starts), np.diff(starts, append=err.size))


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


def _floor_crossing(t, d, t_min, summary, floor, floor_factor):
    """First ``t >= t_min`` where the summary curve is below ``floor_factor * floor``, or None."""
    if not floor_factor > 0:
        raise ValueError(f"floor_factor must be > 0, got floor_factor = {floor_factor!r}")
    floor = _real("floor", floor)
    if floor.ndim > 1 or floor.size not in (1, t.size):
        raise ValueError(f"floor must be a scalar or have shape [T] = ({t.size},), got shape {floor.shape}")
    floor = np.broadcast_to(floor.reshape(-1), t.shape)
    if not (np.isfinite(floor) & (floor >= 0)).all():
        raise ValueError("floor must be finite and >= 0 at every t")
    after = t >= t_min
    # Zeros below the floor are expected (offsets underflow); their log is -inf, not an error.
    with np.errstate(divide="ignore", invalid="ignore"):
        below = summary_curve(d[..., after], summary) < floor_factor * floor[after]
    return t[after][np.argmax(below)] if below.any() else None


def _real(name, x):
    """``x`` as a float64 array, or TypeError/ValueError naming ``name`` (``checks.real_array``)."""
    return real_array(name, x).astype(np.float64, copy=False)


def _check_t(t):
    """``t`` as float64 ``[T]``, positive and strictly increasing."""
    t = _real("t", t)
    if t.ndim != 1 or t.size == 0:
        raise ValueError(f"t must have shape [T] with T >= 1, got shape {t.shape}")
    if not np.isfinite(t).all() or (t <= 0).any():
        k = int(np.argmax(~(np.isfinite(t) & (t > 0))))
        raise ValueError(f"t must be finite and positive; t[{k}] = {_py(t[k])}")
    if (np.diff(t) <= 0).any():
        k = int(np.argmax(np.diff(t) <= 0)) + 1
        raise ValueError(f"t must be strictly increasing; t[{k}] = {_py(t[k])} after t[{k - 1}] = {_py(t[k - 1])}")
    return t


def _check_curves(t, d, name="d"):
    """``t`` as float64 ``[T]`` and ``d`` (called ``name``) as float64 ``[n_pairs, T]`` (n_pairs >= 1) or ``[T]``."""
    t = _check_t(t)
    d = _real(name, d)
    if d.ndim not in (1, 2) or (d.ndim == 2 and d.shape[0] == 0):
        raise ValueError(f"{name} must have shape [n_pairs, T] with n_pairs >= 1, or [T], got shape {d.shape}")
    _check_last_axis(t, d, name)
    return t, d


def _check_reference(name, shape, t):
    """A reference curve of ``power_law_tolerance``'s ``shapes``: float64 ``[T]`` (its values are
    checked in the window, where their log is taken)."""
    shape = _real(f"shapes[{name!r}]", shape)
    if shape.shape != t.shape:
        raise ValueError(f"shapes[{name!r}] must have shape [T] = {t.shape}, got shape {shape.shape}")
    return shape


def _check_last_axis(t, arr, name):
    if arr.ndim == 0 or arr.shape[-1] != t.size:
        raise ValueError(
            f"{name} has shape {arr.shape}: its last axis must match t, which has {t.size} positions"
        )


def _check_confidence(confidence):
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got confidence = {confidence!r}")


def _check_summary(summary):
    if summary not in _SUMMARIES:
        raise ValueError(f"unknown summary {summary!r}; expected one of {_SUMMARIES}")


def _check_window(t, t_min, t_max):
    if not t_min < t_max:
        raise _BadWindowError(f"need t_min < t_max, got t_min = {_py(t_min)} and t_max = {_py(t_max)} "
                              f"(t covers [{_py(t[0])}, {_py(t[-1])}])")
    if t_min < t[0] or t_max > t[-1]:
        raise _BadWindowError(
            f"window [t_min, t_max] = [{_py(t_min)}, {_py(t_max)}] lies outside the data, "
            f"which covers t in [{_py(t[0])}, {_py(t[-1])}]"
        )


def _check_values(t, d, window, ok, what, name="d"):
    """Raise naming the first position in the window where ``ok(d)`` fails for some pair."""
    bad = window & ~ok(d).reshape(-1, t.size).all(axis=0)
    if bad.any():
        raise _BadValuesError(f"{name} is {what} inside the fit window at t = {_py(t[np.argmax(bad)])}")


def _py(x):
    """A position or bound as a plain Python number: int when it is integral, else float."""
    x = float(x)
    return int(x) if x.is_integer() else x
