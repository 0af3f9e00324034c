"""Result files are written whole or not at all; the command line the experiment scripts share."""

import json
import os
from pathlib import Path

import numpy as np
import pytest

from nohair_jax.experiments import experiment_parser
from nohair_jax.results import atomic_path, load_json, save_json, save_npz


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


def test_files_written_together_replace_their_old_versions_together_or_not_at_all(tmp_path):
    """A failure inside ``written_together`` (here a full disk on the second file) leaves both old
    files as they were and no temporary file; a block that succeeds replaces both."""
    import errno

    from nohair_jax.results import written_together

    npz, js = tmp_path / "offsets.npz", tmp_path / "fit.json"
    save_npz(npz, x=np.zeros(3))
    save_json(js, {"v": 0})
    before = npz.read_bytes(), js.read_bytes()
    with pytest.raises(OSError, match="No space"):
        with written_together():
            save_npz(npz, x=np.ones(3))
            with atomic_path(js) as tmp:
                tmp.write_text("{\"v\"")
                raise OSError(errno.ENOSPC, "No space left on device", str(tmp))
    assert (npz.read_bytes(), js.read_bytes()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fit.json", "offsets.npz"]
    with written_together():
        save_npz(npz, x=np.ones(3))
        save_json(js, {"v": 1})
        assert npz.read_bytes() == before[0]  # nothing replaced before the block ends
    assert load_json(js) == {"v": 1} and np.load(npz)["x"].tolist() == [1, 1, 1]


def _hold_lock(folder: Path):
    """A subprocess holding ``folder_lock(folder)`` until killed; returns it once the lock is held."""
    import subprocess
    import sys

    code = ("import sys, time; from nohair_jax.results import folder_lock\n"
            f"with folder_lock({str(folder)!r}):\n"
            "    print('held', flush=True); time.sleep(120)\n")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def test_a_second_writer_into_the_same_out_is_refused_in_one_line(tmp_path, capsys):
    """Two processes, one --out: the second refuses at once, naming the holder's pid, and writes
    nothing; once the holder is killed outright (SIGKILL: the kernel drops its lock) a run succeeds
    and leaves no lock file."""
    import signal

    from nohair_jax.cli import main
    from nohair_jax.results import LOCK_NAME

    out = tmp_path / "run"
    args = ["dynamics", "--gain", "1", "--draws", "2", "--n", "4", "--d", "3", "--steps", "20", "--out", str(out)]
    holder = _hold_lock(out)
    try:
        assert main(args) == 2
        err = capsys.readouterr().err
        assert f"is in use by another nohair process (pid {holder.pid})" in err and err.count("\n") == 1
        assert sorted(p.name for p in out.iterdir()) == [LOCK_NAME]  # the holder's lock, nothing of ours
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert main(args) == 0
    assert (out / "summary.json").exists() and not (out / LOCK_NAME).exists()


def test_the_lock_removes_the_folders_it_created_when_nothing_was_written(tmp_path):
    from nohair_jax.results import folder_lock

    with pytest.raises(ValueError):
        with folder_lock(tmp_path / "a" / "b"):
            raise ValueError("bad input")
    assert not (tmp_path / "a").exists()
    with folder_lock(tmp_path / "a" / "b"):
        save_json(tmp_path / "a" / "b" / "x.json", {})
    assert [p.name for p in (tmp_path / "a" / "b").iterdir()] == ["x.json"]
