"""`nohair dynamics` end to end on tiny ensembles: files, numbers checked independently, clear errors."""

import json

import jax
import numpy as np
import pytest

from nohair_jax import dynamics as dyn
from nohair_jax.cli import main
from nohair_jax.token_dynamics import random_systems

TINY = ["--draws", "3", "--n", "4", "--d", "2", "--steps", "60", "--dt", "0.05"]


def test_dynamics_command_writes_results_that_match_a_direct_simulation(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["dynamics", *TINY, "--gain", "8", "0", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "gain/||V||" in printed and "theory: threshold 1" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert [r["gain_ratio"] for r in summary["rows"]] == [0.0, 8.0]  # sorted
    assert summary["settings"]["horizon"] == pytest.approx(3.0)
    for name in ("measures.png", "threshold.png", "series.npz"):
        assert (out / name).stat().st_size > 1000, name
    with np.load(out / "series.npz") as series:
        assert series["r1__diameter"].shape[0] == 3  # 10, 50, 90 % quantiles
    # the same draws integrated here in the original units: gain 8 ||V||, step 0.05 / ||V||
    x0, Q, K, V = random_systems(0, 3, 4, 2)

    @jax.jit  # one compilation for the three draws
    def final_diameter(x0, Q, K, V):
        b = dyn.drift_bound(V)
        traj = dyn.simulate(x0, Q, K, V, control=dyn.consensus_control(gain=8 * b), dt=0.05 / b, steps=60)
        return dyn.diameter(traj[-1])

    finals = [float(final_diameter(x0[i], Q[i], K[i], V[i])) for i in range(3)]
    controlled = summary["rows"][1]
    assert controlled["final"]["max"] == pytest.approx(max(finals), abs=1e-5)
    assert controlled["reached"] == np.mean(np.array(finals) < 0.1)
    assert controlled["bound"]["value"] == pytest.approx(2 / 8)


@pytest.mark.parametrize("flag, value, message", [
    ("--gain", "-1", "gain must be a finite number >= 0, got -1.0"),
    ("--gain", "nan", "gain must be a finite number >= 0, got nan"),
    ("--gain", "100", "beyond RK4's stable range"),
    ("--steps", "0", "steps must be an int >= 1, got 0"),
    ("--n", "1", "n must be an int >= 2, got 1"),
    ("--dt", "0", "dt must be a finite number > 0, got 0.0"),
])
def test_bad_value_is_one_clear_line_and_no_files(tmp_path, capsys, flag, value, message):
    out = tmp_path / "bad"
    assert main(["dynamics", *TINY, flag, value, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert err.strip().count("\n") == 0  # one line
    assert not out.exists()
