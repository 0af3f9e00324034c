"""The no-hair bound on a real model (docs/definitions.md#bound), in four modules:

    conditions   what the bound is stated in, measured on a model and judged; its coefficients and explicit form
    checks       the shape and explicit checks against measured offsets; check_bound writes them
    records      their results as types (ShapeCheck, ExplicitCheck, NotApplicable), saved and read back
    render       a bound.json as a text table and as a figure

Every public name is importable from ``nohair_jax.bound`` itself.
"""

import importlib

# Public name -> its module, imported on first use (PEP 562): ``bound.records`` (which the claims
# read) must not pull in JAX through ``bound.checks``.
_EXPORTS = {
    "checks": ("check_bound", "check_row", "explicit_check", "explicit_result", "shape_check"),
    "conditions": ("BoundConditions", "BoundNotApplicable", "BoundQuantities", "Condition", "SCALE_RTOL", "coefficients", "explicit_bounds",
                   "measure_conditions"),
    "records": ("BoundRow", "ExplicitCheck", "NotApplicable", "ShapeCheck", "constants_from_saved", "explicit_from_saved",
                "shape_from_dict"),
    "render": ("bound_figure", "draw_bound", "report"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_MODULE_OF)


def __getattr__(name: str):
    if name not in _MODULE_OF:
        raise AttributeError(f"module 'nohair_jax.bound' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"nohair_jax.bound.{_MODULE_OF[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
