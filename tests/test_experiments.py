"""Every experiment script is a part of ``nohair reproduce``.

Their smoke profiles run end to end in tests/test_reproduce.py (the tiny reproduction profile),
which checks each part's summary and figures; the numbers of a smoke run mean nothing (tiny
models, a few pairs). An experiment outside ``reproduce`` would go unrun, so there is none.
"""

from pathlib import Path

from nohair_jax import reproduce

EXPERIMENTS = Path(__file__).parent.parent / "experiments"


def test_every_experiment_is_a_reproduce_part():
    assert {p.stem for p in EXPERIMENTS.glob("*.py")} - {"__init__"} == set(reproduce.PART_NAMES)


def test_every_experiment_has_the_interface_reproduce_calls():
    for name in reproduce.PART_NAMES:
        module = reproduce._experiment(name)
        assert set(module.PROFILES) >= {"smoke", "quick", "full"}, name
        assert {"profile", "out", "settings"} <= set(module.run.__code__.co_varnames), name
