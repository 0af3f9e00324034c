"""Noise floors: where an offset curve is too small to measure, and so to fit (docs/definitions.md#fits).

In float32 an offset cannot be measured below roughly ``eps * ||h||``. ``noise_floor_curve`` turns a
float32-versus-float64 comparison of the same offsets ``[n_pairs, T]`` into an absolute floor ``[T]``
in the units of the offsets; given to ``fit_power_law`` as ``floor``, it ends the window before the
first ``t`` where the summary curve drops below ``floor_factor * floor`` (``_floor_crossing``), records
that ``t`` as ``floor_t``, and refuses (``NoiseFloorError``) rather than fit a window too short to hold
``min_bins`` bins.
"""

from __future__ import annotations

import numpy as np

from nohair_jax.fit._checks import _real
from nohair_jax.fit.binning import _log_bins, summary_curve


class NoiseFloorError(ValueError):
    """The noise floor leaves too short a window to fit; raised instead of fitting below it."""


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
