"""Checks of settings shared by the configs and entry points: a bad value fails early, in one line
that names it (never a traceback from deep inside JAX). Light on purpose: the CLI imports it
before ``--help``."""

from __future__ import annotations

import numbers


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
