"""Every experiment script runs end to end at its smoke profile and writes its files.

The parts of ``nohair reproduce`` run in tests/test_reproduce.py (its tiny profile is their smoke
profile); the rest run here. The numbers of a smoke run mean nothing (tiny models, a few pairs);
this checks that the scripts, their saved data and their figures stay runnable as the library
changes.
"""

import importlib.util
import json
from pathlib import Path

import pytest

from nohair_jax.reproduce import PART_NAMES

EXPERIMENTS = Path(__file__).parent.parent / "experiments"
OUTPUTS = {
    "untrained_alpha": ("summary.json", "alpha_vs_layer.png"),
    "direct_vs_relay": ("split.json", "split.npz", "split.png"),
    "untrained_vs_relay": ("local_exponent.json", "local_exponent.png"),
    "trained_vs_untrained": ("summary.json", "trained_vs_untrained.png"),
    "logit_bias": ("summary.json", "logit_bias.png"),
    "depth_length_sweep": ("summary.json", "depth_prompt/alpha_vs_depth.png", "depth_prompt/alpha_vs_prompt_len.png",
                           "lengths/offsets_vs_t.png"),
    "bound_check": ("summary.json", "bound_margins.png"),
    "relay_model": ("summary.json", "relay_model.png"),
    "consensus": ("summary.json", "series.npz", "trajectories.npz", "measures.png", "trajectories.png"),
    "control_threshold": ("summary.json", "series.npz", "measures.png", "threshold.png"),
    "transformer_dynamics": ("summary.json", "measures.npz", "transformer_dynamics.png"),
}


def load(name):
    spec = importlib.util.spec_from_file_location(name, EXPERIMENTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_experiment_is_covered():
    assert {p.stem for p in EXPERIMENTS.glob("*.py")} - {"__init__"} == set(OUTPUTS)


@pytest.mark.parametrize("name", sorted(set(OUTPUTS) - set(PART_NAMES)))
def test_experiment_smoke_profile(name, tmp_path):
    """The experiments outside ``nohair reproduce``; its parts run at their smoke profile in test_reproduce."""
    load(name).run("smoke", tmp_path)
    for filename in OUTPUTS[name]:
        assert (tmp_path / filename).stat().st_size > 0, filename
        if filename.endswith(".json"):
            json.loads((tmp_path / filename).read_text())
