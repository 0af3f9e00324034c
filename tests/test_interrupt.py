"""Interrupted runs resume to the results of an uninterrupted one, with nothing left behind.

A sweep, a training run and ``nohair reproduce`` are each run once uninterrupted, then in a
subprocess that is killed outright (SIGKILL) in the middle of writing a result file (the file's
bytes written, the rename not yet done: ``_KILLER`` below), then interrupted with SIGINT (Ctrl-C:
the sweep at a moment of its own, the training run inside a checkpoint's save, ``_INTERRUPTER``;
``nohair reproduce`` with its parts side by side), then rerun to the end. The rerun's results
must equal the uninterrupted run's and no temporary file may be left. Stops at random moments,
more than a suite can afford, are ``benchmarks/interruptions.py``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from nohair_jax.cli import main

# Runs `nohair <argv>` and SIGKILLs itself inside the n-th write of a file ending in `suffix`:
# after the temporary file is written whole, before it is renamed into place.
_KILLER = """
import contextlib, os, signal, sys
from nohair_jax import results
from nohair_jax.cli import main
n, suffix, argv = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
plain, seen = results.atomic_path, [0]

@contextlib.contextmanager
def dying(path):
    with plain(path) as tmp:
        yield tmp
        if str(path).endswith(suffix):
            seen[0] += 1
            if seen[0] == n:
                os.kill(os.getpid(), signal.SIGKILL)

results.atomic_path = dying
main(argv)
"""


# Runs the `nohair` program with a Ctrl-C (SIGINT to itself) landing inside the save of checkpoint `step`.
_INTERRUPTER = """
import os, signal, sys
import orbax.checkpoint as ocp
from nohair_jax.cli import console
step, plain = int(sys.argv[1]), ocp.CheckpointManager.save

def interrupted(self, at, *args, **kwargs):
    if at == step:
        os.kill(os.getpid(), signal.SIGINT)
    return plain(self, at, *args, **kwargs)

ocp.CheckpointManager.save = interrupted
sys.argv = ["nohair", *sys.argv[2:]]
console()
"""


def _killed_in_write(n: int, suffix: str, argv: list[str]) -> None:
    done = subprocess.run([sys.executable, "-c", _KILLER, str(n), suffix, *argv], capture_output=True, text=True)
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]


def _interrupted_when(argv: list[str], ready) -> None:
    """Start ``nohair argv``, send SIGINT once ``ready()`` holds: it must end saying how to resume
    (or have finished). A Ctrl-C that lands inside orbax's checkpoint save makes orbax log its own
    traceback first, so the last line is what is checked."""
    proc = subprocess.Popen([sys.executable, "-m", "nohair_jax.cli", *argv], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not ready() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode in (130, 0), err[-2000:]
    if proc.returncode == 130:
        assert err.strip().splitlines()[-1].endswith("interrupted; run the same command again to resume"), err[-2000:]


def _temporaries(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob(".*"))


SWEEP = ["sweep", "--depths", "1,2", "--widths", "16", "--prompt-lens", "2", "--lengths", "24", "--seeds", "1",
         "--pairs", "2", "--n-boot", "10", "--fit-t-min", "4"]


def test_sweep_killed_mid_write_and_interrupted_resumes_to_the_same_cells(tmp_path, assert_same_cells):
    ref, run = tmp_path / "ref", tmp_path / "run"
    assert main([*SWEEP, "--out", str(ref)]) == 0
    _killed_in_write(2, ".npz", [*SWEEP, "--out", str(run)])  # inside the second cell's NPZ write
    assert len(list((run / "cells").glob("*.json"))) == 1 and _temporaries(run)  # one cell kept, one temp left
    _interrupted_when([*SWEEP, "--out", str(run)], lambda: len(list((run / "cells").glob("*.json"))) >= 2)
    assert main([*SWEEP, "--out", str(run)]) == 0
    assert_same_cells(ref, run, 2)
    assert _temporaries(run) == []


TRAIN = ["train", "--depth", "1", "--d-model", "16", "--heads", "2", "--context", "16", "--batch-size", "2",
         "--steps", "12", "--warmup", "2", "--eval-every", "4", "--checkpoint-every", "4", "--log-every", "2"]


def _history(folder: Path) -> list[dict]:
    timing = {"tokens_per_s", "steps_per_s", "wall_s"}
    return [{k: v for k, v in e.items() if k not in timing} for e in json.loads((folder / "history.json").read_text())["history"]]


def test_training_killed_mid_write_and_interrupted_resumes_to_the_same_parameters(tmp_path):
    from flax import nnx

    from nohair_jax.train import load_trained

    ref, run = tmp_path / "ref", tmp_path / "run"
    assert main([*TRAIN, "--out", str(ref)]) == 0
    _killed_in_write(4, "history.json", [*TRAIN, "--out", str(run)])  # history written at steps 0, 2, 4, 6: at 6
    checkpoints = lambda: sorted(int(p.name) for p in (run / "checkpoints").iterdir() if p.name.isdigit())
    assert checkpoints() == [4]
    done = subprocess.run([sys.executable, "-c", _INTERRUPTER, "8", *TRAIN, "--out", str(run)], capture_output=True, text=True)
    assert done.returncode == 130 and checkpoints() == [4, 8], done.stderr[-2000:]  # the save finished first
    assert done.stderr.strip().splitlines()[-1] == "nohair train: interrupted; run the same command again to resume"
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert main([*TRAIN, "--out", str(run)]) == 0
    assert _history(run) == _history(ref)
    mine, theirs = (nnx.state(load_trained(f)) for f in (run, ref))
    for (path, a), (_, b) in zip(nnx.to_flat_state(mine), nnx.to_flat_state(theirs)):
        np.testing.assert_array_equal(np.asarray(a.get_value()), np.asarray(b.get_value()), err_msg=str(path))
    assert _temporaries(run) == []


REPRODUCE = ["reproduce", "--profile", "tiny", "--only", "relay_model", "--only", "direct_vs_relay"]


def test_reproduce_killed_mid_part_resumes_to_the_same_claims(tmp_path):
    ref, run = tmp_path / "ref", tmp_path / "run"
    assert main([*REPRODUCE, "--jobs", "1", "--out", str(ref)]) == 0
    _killed_in_write(1, "split.json", [*REPRODUCE, "--jobs", "1", "--out", str(run)])  # inside the second part
    assert (run / "relay_model" / "part.json").exists() and not (run / "direct_vs_relay" / "part.json").exists()
    assert main([*REPRODUCE, "--jobs", "2", "--out", str(run)]) == 0  # resumed with the parts side by side
    strip = lambda c: {k: v for k, v in c.items() if k != "wall_s"}
    claims = [json.loads((f / "claims.json").read_text())["claims"] for f in (ref, run)]
    assert [strip(c) for c in claims[0]] == [strip(c) for c in claims[1]]
    assert _temporaries(run) == []


def _marked_processes(mark: str) -> list[int]:
    """Pids of live processes whose environment holds ``NOHAIR_TEST_MARK=mark`` (a run and its workers)."""
    pids = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if f"NOHAIR_TEST_MARK={mark}".encode() in environ.read_bytes().split(b"\0"):
                pids.append(int(environ.parent.name))
        except OSError:  # gone meanwhile, or not ours to read
            pass
    return pids


def _gone(mark: str, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while _marked_processes(mark) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not _marked_processes(mark)


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads processes from /proc (Linux)")
def test_parts_side_by_side_end_with_the_run_killed_or_interrupted(tmp_path):
    """Workers die with a SIGKILLed parent and stop when it is interrupted, at once: the dilution
    part (about 13 s at the tiny profile) does not get to finish."""
    run, parts = tmp_path / "run", ("relay_model", "dilution")
    argv = ["reproduce", "--profile", "tiny", *(f"--only={name}" for name in parts), "--jobs", "2", "--out", str(run)]
    for sig in (signal.SIGKILL, signal.SIGINT):
        mark = f"{os.getpid()}-{sig}"
        proc = subprocess.Popen([sys.executable, "-m", "nohair_jax.cli", *argv], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, env=dict(os.environ, NOHAIR_TEST_MARK=mark))
        deadline = time.monotonic() + 120
        while not all((run / name / "started.json").exists() for name in parts) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None and len(_marked_processes(mark)) >= 2  # the run and its workers
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
        assert _gone(mark, within_s=5), f"workers outlived the run after {sig!r}: {_marked_processes(mark)}"
        assert not (run / "dilution" / "part.json").exists()
        if sig == signal.SIGINT:
            assert proc.returncode == 130, err[-2000:]
            assert err.strip().splitlines()[-1].endswith("interrupted; run the same command again to resume"), err
            assert "Traceback" not in err, err
        for name in parts:  # the next round starts both again
            for marker in ("started.json", "part.json"):
                (run / name / marker).unlink(missing_ok=True)
    assert _temporaries(run) == []


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_at_any_moment_ends_in_one_line_and_leaves_no_folder(tmp_path, signum):
    """Ctrl-C or SIGTERM from the program's first instant (the imports included) to the end of the
    measurement: the exit code is the signal's (130, 143) unless the run had finished, stderr holds
    no traceback and ends in one line saying so, and a run stopped before its results leaves no
    folder or lock behind. The first instant is ``nohair_jax.start``: the interpreter's own start
    before it (about 20 ms here, site and the package's import-light ``__init__``) is out of reach,
    so the earliest signal is sent at 100 ms, inside the imports of JAX."""
    program = Path(sys.executable).with_name("nohair")
    if not program.exists():
        pytest.skip("the nohair program is not installed beside this Python")
    argv = ["offsets", "--depth", "1", "--d-model", "16", "--heads", "2", "--prompt-len", "2", "--length", "64",
            "--pairs", "2", "--n-boot", "10", "--fit-t-min", "8"]
    stopped = 0
    for k, delay in enumerate((0.1, 0.3, 0.8, 2.0)):
        out = tmp_path / f"run{k}"
        proc = subprocess.Popen([str(program), *argv, "--out", str(out)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        time.sleep(delay)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=120)
        assert "Traceback" not in err, (delay, err[-2000:])
        if proc.returncode == 0:  # finished before the signal: whole results
            assert (out / "offsets.png").exists()
            continue
        if proc.returncode == -signum:  # still in the interpreter's own start (a loaded machine): the signal's
            assert err == "" and not out.exists()  # default action, which a shell reports as 128 + signum too
            continue
        assert proc.returncode == 128 + signum, (delay, proc.returncode, err[-2000:])
        last = err.strip().splitlines()[-1]
        word = "terminated" if signum == signal.SIGTERM else "interrupted"
        assert last in (f"nohair: {word} while starting; nothing was written",
                        f"nohair offsets: {word}; run the same command again to resume"), (delay, err[-2000:])
        assert not out.exists(), (delay, sorted(p.name for p in out.iterdir()))
        stopped += 1
    assert stopped >= 2  # most moments land before the results: the property was tested
