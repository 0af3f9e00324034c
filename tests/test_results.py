"""Result files are written whole or not at all; the command line the experiment scripts share."""

import json
import os
from pathlib import Path

import numpy as np
import pytest

from nohair_jax.results import atomic_path, experiment_parser, load_json, save_json, save_npz


def test_failed_write_leaves_nothing_behind(tmp_path):
    target = tmp_path / "sub" / "fit.json"
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text('{"half": ')
            raise RuntimeError("interrupted")
    assert not target.exists()
    assert list((tmp_path / "sub").iterdir()) == []


def test_failed_rewrite_keeps_the_old_file(tmp_path):
    target = tmp_path / "fit.json"
    save_json(target, {"alpha": 0.5})
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("garbage")
            raise RuntimeError("interrupted")
    assert load_json(target) == {"alpha": 0.5}


def test_json_is_strict_and_numpy_aware(tmp_path):
    path = save_json(tmp_path / "x.json", {"a": np.float32(1.5), "b": np.arange(3), "c": float("nan"), "d": (1, 2)})
    text = path.read_text()
    assert json.loads(text) == {"a": 1.5, "b": [0, 1, 2], "c": None, "d": [1, 2]}
    assert "NaN" not in text
    # the mode any other output file gets under this umask (mkstemp's temporary files are 0o600)
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask


def test_npz_round_trip(tmp_path):
    x = np.random.default_rng(0).normal(size=(2, 3, 4))
    save_npz(tmp_path / "o.npz", l2=x, t=np.arange(1, 5))
    with np.load(tmp_path / "o.npz") as data:
        np.testing.assert_array_equal(data["l2"], x)
        np.testing.assert_array_equal(data["t"], [1, 2, 3, 4])


def test_experiment_parser_defaults_and_errors(capsys):
    profiles = {"smoke": {}, "quick": {}}
    args = experiment_parser("doc", "relay_model", profiles).parse_args([])
    assert (args.profile, args.out, args.seed) == ("quick", Path("results/relay_model"), 0)
    args = experiment_parser("doc", "x", profiles).parse_args(["--profile", "smoke", "--out", "o", "--seed", "3"])
    assert (args.profile, args.out, args.seed) == ("smoke", Path("o"), 3)
    assert not hasattr(experiment_parser("doc", "x", profiles, seed=False).parse_args([]), "seed")
    with pytest.raises(SystemExit):
        experiment_parser("doc", "x", profiles).parse_args(["--profile", "huge"])
    assert "invalid choice: 'huge'" in capsys.readouterr().err


def test_a_killed_writers_temporary_file_is_removed_by_the_next_write(tmp_path):
    """SIGKILL runs no cleanup: the temporary file stays until the file is next written whole."""
    import signal
    import subprocess
    import sys

    target = tmp_path / "offsets_vs_t.png"
    code = ("import sys, time; from nohair_jax.results import atomic_path\n"
            f"with atomic_path({str(target)!r}) as tmp:\n"
            "    tmp.write_bytes(b'partial'); print(tmp, flush=True); time.sleep(60)\n")
    writer = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    left = Path(writer.stdout.readline().strip())
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    assert left.exists() and not target.exists()
    live = tmp_path / f".{target.name}.{os.getpid()}.abc.png"  # a live writer's file is not touched
    live.write_bytes(b"mine")
    save_json(tmp_path / "other.json", {})  # another file's write removes nothing here
    assert left.exists()
    with atomic_path(target) as tmp:
        tmp.write_bytes(b"whole")
    assert target.read_bytes() == b"whole" and not left.exists() and live.exists()
