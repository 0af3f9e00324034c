"""The difference of two power-law exponents on one window, with one interval (docs/definitions.md#intervals).

Two sets of offset curves ``d_a [n_a, T]`` and ``d_b [n_b, T]`` at positions ``t [T]`` (tokens) are each
fitted as ``fit_power_law`` fits; ``alpha_a - alpha_b`` (dimensionless) is measured on the window both
hold, ``[t_min, t_end]``, and its t-interval comes from resampling the two sets independently
(``alpha_difference``, Welch degrees of freedom) or, where row i of both is the same prompt pair, the same
pairs for both (``paired_alpha_difference``): a comparison of two conditions as one interval, not two.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np

from nohair_jax.fit._checks import (
    _BadValuesError, _BadWindowError, _check_confidence, _check_curves, _check_groups, _check_t, _py, _real,
)
from nohair_jax.fit.binning import _bin_mean, _log_bins, _ols_loglog, summary_curve
from nohair_jax.fit.intervals import _standard_error, _units, _welch_dof, bootstrap_indices, t_interval
from nohair_jax.fit.powerlaw import FitRefused, _bootstrap_alphas, _or_refuse, fit_power_law


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


class _CommonWindow(NamedTuple):
    """The positions both alphas of a difference are measured on: ``mask [T]``, t in ``[t_min, t_end]``;
    ``starts [n_bins]``, where each log bin begins in ``t[mask]``; ``log_t_bin [n_bins]``, the bins' mean log t."""

    mask: np.ndarray
    starts: np.ndarray
    log_t_bin: np.ndarray

    def alpha(self, d: np.ndarray, summary: str) -> float:
        """alpha of the summary curve of ``d [n_pairs, T]`` on this window."""
        log_y_bin = _bin_mean(np.log(summary_curve(d[..., self.mask], summary)), self.starts)
        slope, _, _ = _ols_loglog(self.log_t_bin, log_y_bin)
        return float(-slope)

    def bootstrap_alphas(self, d: np.ndarray, summary: str, resamples: np.ndarray) -> np.ndarray:
        """alpha of ``d [n_pairs, T]`` on this window for each resample of its pairs (the rows of
        ``resamples``): ``[n_boot]``."""
        return _bootstrap_alphas(d[..., self.mask], self.log_t_bin, self.starts, summary, resamples)


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
    point, sides, window = _point_difference(t, d_a, d_b, t_min=t_min, t_max=t_max, floor_a=floor_a, floor_b=floor_b,
                                             groups_a=groups_a, groups_b=groups_b, confidence=confidence,
                                             bins_per_decade=bins_per_decade, summary=summary)
    boots = [window.bootstrap_alphas(d, summary, bootstrap_indices(d.shape[0], n_boot, seed + k, groups))
             for k, (d, groups) in enumerate(sides)]
    if not n_boot > 0:
        return point
    units = [_units(d.shape[0], groups) for d, groups in sides]
    se = [float(_standard_error(b, n)) for b, n in zip(boots, units)]
    dof = _welch_dof(se, [n - 1 for n in units])
    return dataclasses.replace(point, ci=t_interval(point.difference, float(np.hypot(*se)), dof, confidence), dof=dof)


def _point_difference(t, d_a, d_b, *, t_min, t_max, floor_a, floor_b, groups_a, groups_b, confidence, bins_per_decade,
                      summary) -> tuple[AlphaDifference, list[tuple[np.ndarray, np.ndarray | None]], _CommonWindow]:
    """``alpha_difference`` without its interval (``ci`` and ``dof`` None), the checked sides
    ``[(d_a, groups_a), (d_b, groups_b)]`` and the common window both alphas were measured on."""
    _check_confidence(confidence)
    t = _check_t(t)
    common = dict(t_min=t_min, t_max=t_max, bins_per_decade=bins_per_decade, summary=summary, n_boot=0)
    checked = []
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
    fits = []
    for side, d, floor, groups in checked:
        try:
            fits.append(fit_power_law(t, d, floor=floor, **common))
        except _BadWindowError:
            raise
        except (ValueError, TypeError) as err:  # the curves' values or the floor: say which side's
            raise type(err)(f"side {side} (d_{side}, floor_{side}): {err}") from None
    sides = [(d, groups) for _, d, _, groups in checked]
    t_end = min(fit.t_range[1] for fit in fits)
    mask = (t >= t_min) & (t <= t_end)
    _, starts = _log_bins(t[mask], t_min, t_end, bins_per_decade)
    window = _CommonWindow(mask, starts, _bin_mean(np.log(t[mask]), starts))
    alpha_a, alpha_b = (window.alpha(d, summary) for d, _ in sides)
    point = AlphaDifference(difference=alpha_a - alpha_b, ci=None, alpha_a=alpha_a, alpha_b=alpha_b,
                            t_range=(_py(t[mask][0]), _py(t_end)), confidence=float(confidence))
    return point, sides, window


def paired_alpha_difference(
    t, d_a, d_b, *, t_min=32, t_max=None, floor_a=None, floor_b=None, groups=None,
    n_boot=1000, confidence=0.95, seed=0, bins_per_decade=8, summary="mean",
) -> AlphaDifference:
    """``alpha(d_a) - alpha(d_b)`` of one set of pairs measured under two conditions: row i of
    ``d_a [n_pairs, T]`` and row i of ``d_b [n_pairs, T]`` are the same prompt pair (same texts, same
    seed, same order). The alphas and their common window are ``alpha_difference``'s.

    The interval is paired, and so is the ``AlphaDifference`` returned: each of ``n_boot`` resamples
    draws one set of pair indices (``bootstrap_indices`` with ``whole_groups``: pairs, or with ``groups``,
    int ``[n_pairs]`` a label per pair such as its seed, whole groups) and fits both sides on it, so that
    what a pair adds to both alphas alike cancels in their difference; a t-interval (``t_interval``) with
    the standard error of the resampled differences and ``n_pairs - 1`` degrees of freedom (``n_groups - 1``
    over several groups), not Welch's. Its coverage at the sizes the claims use is checked by simulation
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
    point, _, window = _point_difference(t, d_a, d_b, t_min=t_min, t_max=t_max, floor_a=floor_a, floor_b=floor_b,
                                         groups_a=groups, groups_b=groups, confidence=confidence,
                                         bins_per_decade=bins_per_decade, summary=summary)
    if n_boot == 0:
        return point
    # One draw for both sides: the pairing.
    resamples = bootstrap_indices(d_a.shape[0], n_boot, seed, groups, whole_groups=True)
    boot = window.bootstrap_alphas(d_a, summary, resamples) - window.bootstrap_alphas(d_b, summary, resamples)
    units = _units(d_a.shape[0], groups)
    ci = t_interval(point.difference, float(_standard_error(boot, units)), units - 1, confidence)
    return dataclasses.replace(point, ci=ci, dof=float(units - 1))


def difference_or_refuse(t, d_a, d_b, **kwargs) -> AlphaDifference | FitRefused:
    """``alpha_difference(t, d_a, d_b, **kwargs)``, or a ``FitRefused`` where either side's data refuse
    a fit (as ``fit_or_refuse``); a bad setting raises."""
    return _or_refuse(alpha_difference, t, d_a, d_b, **kwargs)


def paired_difference_or_refuse(t, d_a, d_b, **kwargs) -> AlphaDifference | FitRefused:
    """``paired_alpha_difference(t, d_a, d_b, **kwargs)``, or a ``FitRefused`` where either side's data
    refuse a fit (as ``difference_or_refuse``); a bad setting, unequal sides included, raises."""
    return _or_refuse(paired_alpha_difference, t, d_a, d_b, **kwargs)
