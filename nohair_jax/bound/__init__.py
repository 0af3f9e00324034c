"""The no-hair bound on a real model (docs/definitions.md#bound), in three modules:

    conditions   what the bound is stated in, measured on a model; its coefficients and explicit form
    checks       the shape and explicit checks against measured offsets; check_bound writes them
    report       a bound.json as a text table and as a figure

Every public name is importable from ``nohair_jax.bound`` itself.
"""

from nohair_jax.bound.checks import check_bound, check_row, explicit_check, shape_check
from nohair_jax.bound.conditions import (
    BoundConditions, BoundNotApplicable, coefficients, explicit_bounds, measure_conditions,
)
from nohair_jax.bound.report import bound_figure, draw_bound, report

__all__ = [
    "BoundConditions",
    "BoundNotApplicable",
    "bound_figure",
    "check_bound",
    "check_row",
    "coefficients",
    "draw_bound",
    "explicit_bounds",
    "explicit_check",
    "measure_conditions",
    "report",
    "shape_check",
]
