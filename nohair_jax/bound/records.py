"""The checks' results as types, and how they are saved and read back.

``ShapeCheck`` and ``ExplicitCheck`` are one layer of the shape and the explicit check
(``checks.shape_check``, ``checks.explicit_check``); a layer the shape test cannot fit is a
``fit.FitRefused``, and a bound that does not apply to a model is ``NotApplicable`` (the reason
``conditions.BoundNotApplicable`` gave). In JSON a refusal is ``{"error": reason}``, as a refused fit
is in ``fit.json``: files written before these types existed read back alike. Code reads saved
records through ``shape_from_dict``, ``explicit_from_saved`` and ``constants_from_saved`` only;
``BoundRow`` is what the claims read of one model's checks.
"""

from __future__ import annotations

import dataclasses
from typing import TypedDict

from nohair_jax.claims import Record
from nohair_jax.fit import FitRefused


def _plain(record) -> dict:
    return {f.name: list(v) if isinstance(v := getattr(record, f.name), tuple) else v
            for f in dataclasses.fields(record)}


def _interval(saved) -> tuple[float, float] | None:
    """None for no interval, also as ``[null, null]`` (files written before a missing interval was None)."""
    return None if saved is None or None in saved else tuple(saved)


@dataclasses.dataclass(frozen=True)
class ShapeCheck:
    """One layer of the shape test: the log-log slope of offset / relay shape on ``window`` (t),
    its interval (None without one), the same for ``P (log t)^(l-1) / t`` (information only), the
    relay shape's fitted prefactor (units of h) and whether the layer passes."""

    layer: int
    window: tuple[int, int]
    slope: float
    interval: tuple[float, float] | None
    slope_log_shape: float
    interval_log_shape: tuple[float, float] | None
    relay_prefactor: float
    passes: bool
    dof: float | None = None  # the slope interval's degrees of freedom (``fit.t_interval``), None without one

    def to_dict(self) -> dict:
        return _plain(self)


@dataclasses.dataclass(frozen=True)
class ExplicitCheck:
    """One layer of the explicit check: the smallest bound / measured over t (``margin``; inf where
    every offset is 0), where it is attained (None if nowhere), whether the bound holds at every t;
    the same for the closed form (``_closed``)."""

    layer: int
    margin: float
    t_margin: int | None
    holds: bool
    margin_closed: float
    t_margin_closed: int | None
    holds_closed: bool

    def to_dict(self) -> dict:
        return _plain(self)


@dataclasses.dataclass(frozen=True)
class NotApplicable:
    """The explicit bound does not exist for a model, and why (one line)."""

    reason: str

    def to_dict(self) -> dict:
        """``{"error": reason}``, as files have always held it."""
        return {"error": self.reason}


class BoundRow(TypedDict):
    """What the claims read of a ``check_bound`` summary (``check_row``): the model's depth, the failed
    conditions, the largest logit per layer, the smallest block-norm sigma_min over sqrt(eps), the
    explicit check (``ExplicitCheck`` records, or a ``NotApplicable``'s) and the shape test
    (``ShapeCheck`` records)."""

    depth: int
    failures: list[str]
    logit_bound: list[float]
    sigma_min_over_floor: float
    explicit: list[Record] | Record
    shape: list[Record]


def shape_from_dict(saved: dict) -> ShapeCheck | FitRefused:
    """A saved shape-test layer (``ShapeCheck.to_dict`` or a refusal) read back."""
    if "error" in saved:
        return FitRefused(saved["error"])
    return ShapeCheck(layer=saved["layer"], window=tuple(saved["window"]), slope=saved["slope"],
                      interval=_interval(saved["interval"]), slope_log_shape=saved["slope_log_shape"],
                      interval_log_shape=_interval(saved["interval_log_shape"]),
                      relay_prefactor=saved["relay_prefactor"], passes=saved["passes"], dof=saved.get("dof"))


def explicit_from_saved(saved: list | dict) -> list[ExplicitCheck] | NotApplicable:
    """A saved explicit check (a list of layers, or a refusal) read back. JSON keeps inf and nan as
    null: a margin read as None is such a value."""
    if isinstance(saved, dict):
        return NotApplicable(saved["error"])
    return [ExplicitCheck(**{f.name: e[f.name] for f in dataclasses.fields(ExplicitCheck)}) for e in saved]


def constants_from_saved(saved: dict) -> dict | NotApplicable:
    """Saved explicit constants (``{"C", "a", "b"}`` lists per layer, null beyond float64) or a refusal."""
    return NotApplicable(saved["error"]) if "error" in saved else saved
