"""Local exponents: how the decay exponent of an offset curve changes along it (docs/definitions.md#fits).

Curves ``d [n_pairs, T]`` (or ``[T]``) at positions ``t [T]`` (tokens), log-binned as ``fit_power_law``
bins them. The curves are not pure power laws (the theory predicts ``(log t)^(L-1) / t``, whose local
exponent drifts with ``t``): ``local_exponent`` gives ``alpha(t) = -dlog d / dlog t``, ``local_exponent_rise``
how much it rises across a window, with an interval over pairs, and ``alpha_vs_window`` the fitted
``alpha`` over many windows, so that a window effect is never mistaken for a finding. Exponents are
dimensionless.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from nohair_jax.fit._checks import (
    _BadWindowError, _check_confidence, _check_curves, _check_groups, _check_values, _check_window, _py, _real,
)
from nohair_jax.fit.binning import _bin_mean, _log_bins, summary_curve
from nohair_jax.fit.floors import NoiseFloorError
from nohair_jax.fit.intervals import t_interval
from nohair_jax.fit.powerlaw import fit_power_law


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
    with ``dof`` degrees of freedom at ``confidence`` (bootstrap standard error; None for one curve);
    ``t_range``: the first and last point of the local exponent's grid (positions)."""

    rise: float
    first: float
    last: float
    ci: tuple[float, float] | None
    dof: float | None
    confidence: float
    t_range: tuple[float, float]

    def brief(self, spec: str = "+.2f") -> str:
        """The rise and its interval, ``"+0.52 [+0.40, +0.61]"``."""
        return format(self.rise, spec) + ("" if self.ci is None else f" [{self.ci[0]:{spec}}, {self.ci[1]:{spec}}]")

    def to_dict(self) -> dict:
        return dict(rise=self.rise, ci=None if self.ci is None else list(self.ci), first=self.first, last=self.last,
                    t_range=list(self.t_range), confidence=self.confidence, dof=self.dof)


def local_exponent_rise(t, d, *, t_min=1, t_max=None, bins_per_decade=8, confidence=0.95, groups=None) -> ExponentRise:
    """How much the local exponent of the geometric-mean curve of ``d [n_pairs, T]`` (or ``[T]``) rises from
    the first to the last quarter of its log bins on ``[t_min, t_max]`` (``local_exponent``, ``quarter_rise``),
    with a t-interval at ``confidence`` over pairs (``groups``: over seeds, each seed's mean of its pairs' rises).

    The geometric mean, not the mean: the rise is then linear in the pairs' log curves, the mean of each
    pair's own rise, so its t-interval is a mean's. The mean curve of pairs whose exponents spread by ``s``
    bends by ``s^2 log(t)^2 / 2`` (the slowest pair takes over), a rise of the sample's spread and not of
    the curve, whose interval is too narrow (docs/judge_calibration.md: it covered 66 % at 4 pairs).
    """
    t, d = _check_curves(t, d)
    _check_confidence(confidence)
    if groups is not None:
        groups = _check_groups("groups", groups, d.shape[0] if d.ndim == 2 else 1, "d")
    t_max = t[-1] if t_max is None else t_max
    t_grid, exponents = local_exponent(t, d, bins_per_decade=bins_per_decade, summary="geomean", t_min=t_min,
                                       t_max=t_max)
    rise, first = float(quarter_rise(exponents)), float(exponents[: max(1, exponents.size // 4)].mean())
    ci = dof = None
    if d.ndim == 2 and d.shape[0] > 1:
        own = np.array([quarter_rise(local_exponent(t, pair, bins_per_decade=bins_per_decade, t_min=t_min,
                                                    t_max=t_max)[1]) for pair in d])  # each pair's; their mean: rise
        if groups is not None and np.unique(groups).size > 1:
            own = np.array([own[groups == g].mean() for g in np.unique(groups)])  # the seeds are the units
        dof = own.size - 1
        ci = t_interval(rise, float(own.std(ddof=1) / np.sqrt(own.size)), dof, confidence)
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
