"""Every experiment script runs end to end at its smoke profile and writes its files.

The numbers of a smoke run mean nothing (tiny models, a few pairs); this checks that the scripts,
their saved data and their figures stay runnable as the library changes.
"""

import importlib.util
import json
from pathlib import Path

import pytest

EXPERIMENTS = Path(__file__).parent.parent / "experiments"
OUTPUTS = {
    "untrained_alpha": ("summary.json", "alpha_vs_layer.png"),
    "direct_vs_relay": ("split.json", "split.npz", "split.png"),
    "untrained_vs_relay": ("local_exponent.json", "local_exponent.png"),
    "trained_vs_untrained": ("summary.json", "trained_vs_untrained.png"),
    "logit_bias": ("summary.json", "logit_bias.png"),
}


def load(name):
    spec = importlib.util.spec_from_file_location(name, EXPERIMENTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_experiment_is_covered():
    assert {p.stem for p in EXPERIMENTS.glob("*.py")} == set(OUTPUTS)


@pytest.mark.parametrize("name", sorted(OUTPUTS))
def test_experiment_smoke_profile(name, tmp_path):
    load(name).run("smoke", tmp_path)
    for filename in OUTPUTS[name]:
        assert (tmp_path / filename).stat().st_size > 0, filename
        if filename.endswith(".json"):
            json.loads((tmp_path / filename).read_text())
