"""Results read back from the JSON their ``to_dict()`` wrote (``fit.json``, ``nohair reproduce``).

Every result of the fits is a frozen dataclass whose ``to_dict()`` holds plain ints, floats, None and
lists; ``fit_from_dict`` tells them apart by their keys (docs/definitions.md#fits).
"""

from __future__ import annotations

from nohair_jax.fit.differences import AlphaDifference
from nohair_jax.fit.exponents import ExponentRise
from nohair_jax.fit.powerlaw import FitRefused, PowerLawFit
from nohair_jax.fit.tolerance import PowerLawTolerance


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
