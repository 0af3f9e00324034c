"""Checks of settings shared by the configs and entry points: a bad value fails early, in one line
that names it (never a traceback from deep inside JAX). Light on purpose: the CLI imports it
before ``--help``."""

from __future__ import annotations

import math
import numbers
import os


def is_int(value) -> bool:
    """A Python or numpy integer (a bool is not one)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_int(name: str, value, low: int = 1) -> int:
    """``value`` as a Python int; ValueError ``"<name> must be an int >= <low>, got <value>"`` unless
    it is an integer >= ``low`` (numpy integers pass and come back as Python ints, so that configs
    holding them stay JSON-able)."""
    if not (is_int(value) and value >= low):
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    return int(value)


def physical_memory() -> int:
    """This machine's memory in bytes: all of it, not what is free now, so that whether a model is refused as
    too big does not depend on what else happens to be running."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def real_array(name: str, value):
    """``value`` as a numpy array of real numbers (integer or floating dtype kept; numbers held as
    Python objects become float64): TypeError naming ``name`` for booleans, complex numbers, text
    and other objects, ValueError for a ragged nested sequence. Shapes are the caller's to check."""
    import numpy as np  # here, not at the top: the CLI imports this module before --help

    try:
        arr = np.asarray(value)
    except ValueError:  # numpy refuses ragged nested sequences
        raise ValueError(f"{name} must be a rectangular array of real numbers, got a ragged {type(value).__name__}") from None
    if arr.dtype.kind == "O":  # numbers held as objects; numpy would also convert text and booleans
        if not all(isinstance(x, numbers.Real) and not isinstance(x, (bool, np.bool_)) for x in arr.flat):
            raise TypeError(f"{name} must hold real numbers, got {type(value).__name__} {_brief(value)}")
        arr = arr.astype(np.float64)
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"{name} must hold real numbers, got dtype {arr.dtype}")
    return arr


def integer_array(name: str, value, what: str = "token ids"):
    """``value`` as an array of integers (numpy; an array with a shape and a dtype, a JAX one or a traced
    one, as it is): ValueError naming ``name`` for a ragged nested sequence, TypeError for any other
    dtype (booleans, floats, text, objects). Shapes and ranges are the caller's to check."""
    import numpy as np  # here, not at the top: the CLI imports this module before --help

    if not (hasattr(value, "shape") and hasattr(value, "dtype")):
        try:
            value = np.asarray(value)
        except ValueError:  # numpy refuses ragged nested sequences
            raise ValueError(f"{name} must be a rectangular array of {what}, got a ragged {type(value).__name__}") from None
    if not np.issubdtype(value.dtype, np.integer):
        raise TypeError(f"{name} must hold integer {what}, got dtype {value.dtype}")
    return value


def _brief(value) -> str:
    """A one-line, short rendering of a bad value for an error message."""
    return " ".join(repr(value).split())[:60]


# RK4 is stable on dx/ds = -r x for r ds up to about 2.785; stay clear of the edge (token dynamics).
RK4_STABLE = 2.5


def check_settings(*, draws: int, n: int, d: int, heads: int, steps: int, dt: float, eps: float,
                   gains=()) -> None:
    """The token dynamics' settings (``token_dynamics.gain_sweep``): raise ``ValueError`` naming the first bad
    value, before any work or file is made and before JAX loads (``nohair dynamics`` checks here first)."""
    for name, value, low in (("draws", draws, 1), ("n", n, 2), ("d", d, 2), ("heads", heads, 1), ("steps", steps, 1)):
        check_int(name, value, low)
    for name, value in (("dt", dt), ("eps", eps)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    for gain in gains:
        if not (math.isfinite(gain) and gain >= 0):
            raise ValueError(f"gain must be a finite number >= 0, got {gain!r}")
        if gain * dt > RK4_STABLE:
            raise ValueError(f"gain * dt = {gain * dt:g} is beyond RK4's stable range ({RK4_STABLE}); lower dt")
