"""The parts of ``nohair reproduce``: every experiment module declares its own.

A *part* is one module of ``nohair_jax.experiments`` (the repository's ``experiments/``); its name is
the module's name. The module declares ``PART = Part(...)``: where it sits in the report, its title,
what it writes and which of its own profiles (with settings overriding it) each reproduction profile
runs. ``reproduce`` finds the parts here and keeps no list of its own: a new experiment is a new file.

The names are read from the folder without importing the modules (which load JAX), so that the
command line checks ``--only`` first; the declarations are read by importing them (``find_part``).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import pkgutil
from types import MappingProxyType, ModuleType

PACKAGE = "nohair_jax.experiments"
# Reproduction profiles: "tiny" a smoke test of every part; "quick" sized for the main job's budget on two
# CPU cores (docs/results.md: the time per part), so some parts run below their own quick profile; "full"
# the small models trained until their held-out loss levels off, 3 seeds (docs/benchmarks.md: its time).
PROFILES = ("tiny", "quick", "full")

Plan = tuple[str, dict]  # (the experiment's own profile, settings overriding it)


@dataclasses.dataclass(frozen=True)
class Part:
    """One experiment in the report, as its module declares it (``PART``).

    order: its place in the report (ascending); title, about: its section's heading and one paragraph;
    figures: the figures to show, relative to its folder; summary: the file its claims are judged from.
    tiny, quick, full: the ``Plan`` each reproduction profile runs (``full`` None: as ``quick``).
    seconds: its quick profile's time on one core, roughly (measured: docs/results.md); parts run side
    by side start longest first, so that the longest do not start last and run on alone.
    name: the module's name, filled in by ``find_part``.
    """

    order: int
    title: str
    about: str
    figures: tuple[str, ...]
    summary: str = "summary.json"
    tiny: Plan = ("smoke", MappingProxyType({}))
    quick: Plan = ("quick", MappingProxyType({}))
    full: Plan | None = None
    seconds: int = 30
    name: str = ""

    def plan(self, profile: str) -> Plan:
        """The experiment's profile and its settings at the reproduction ``profile`` (one of ``PROFILES``)."""
        if profile not in PROFILES:
            raise ValueError(f"unknown profile {profile!r}; choose one of {list(PROFILES)}")
        exp_profile, settings = getattr(self, profile) or self.quick
        return exp_profile, dict(settings)


def part_names() -> tuple[str, ...]:
    """The parts' names: the experiment modules (not ``_private`` ones), alphabetical, none imported."""
    folders = importlib.util.find_spec(PACKAGE).submodule_search_locations
    return tuple(sorted(m.name for m in pkgutil.iter_modules(folders) if not m.name.startswith("_")))


def experiment(name: str) -> ModuleType:
    """The experiment module of the part ``name``."""
    return importlib.import_module(f"{PACKAGE}.{name}")


def find_part(name: str) -> Part:
    """The part ``name`` as its module declares it, its name filled in."""
    declared = getattr(experiment(name), "PART", None)
    if not isinstance(declared, Part):
        raise TypeError(f"experiments/{name}.py declares no PART = Part(...): every experiment module is a part")
    return dataclasses.replace(declared, name=name)


def find_parts() -> tuple[Part, ...]:
    """Every part, in report order."""
    return tuple(sorted((find_part(name) for name in part_names()), key=lambda p: (p.order, p.name)))


__all__ = ["PACKAGE", "PROFILES", "Part", "Plan", "experiment", "find_part", "find_parts", "part_names"]
