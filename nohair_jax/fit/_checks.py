"""Input checks of the fits: positions ``t [T]``, curves ``[n_pairs, T]`` or ``[T]``, windows, group
labels and settings, each failing with an error that names the argument (docs/definitions.md#fits).

``_BadWindowError`` and ``_BadValuesError`` are what the data, not a setting, refuse: the ``*_or_refuse``
functions turn them into ``FitRefused``.
"""

from __future__ import annotations

import numpy as np

from nohair_jax.checks import real_array

_SUMMARIES = ("mean", "geomean", "median")


class _BadWindowError(ValueError):
    """The requested window is empty, reversed, outside the data or holds too few bins."""


class _BadValuesError(ValueError):
    """The curves are non-finite, or not positive where a log is taken, inside the window."""


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
