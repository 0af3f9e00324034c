"""Runs killed at random moments resume to the results of an uninterrupted run.

The test suite kills runs at chosen points (inside a result file's write, inside a checkpoint's
save); this script kills them at random ones, more times than a suite can afford. For each of a
sweep, a training run and ``nohair reproduce`` (tiny, two parts side by side) it runs the command
once uninterrupted and times it, then starts it again in another folder and stops it after a
uniformly random fraction of that time, with SIGKILL or SIGINT (a fair coin, seeded), as many
times as asked, and finally lets it finish. It prints, per command, how the stops ended (exit
codes), whether the finished results equal the uninterrupted run's (sweep cells array for array,
training parameters and history, the claims table; timings left out) and any temporary file left;
it exits 1 if any command's results differ, a file is left or a stop printed a traceback.

    python benchmarks/interruptions.py                 # 10 stops per command (about 5 minutes on 2 CPU cores)
    python benchmarks/interruptions.py --stops 3       # a smoke run
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

COMMANDS = {
    "sweep": ["sweep", "--depths", "1,2", "--widths", "16", "--prompt-lens", "2", "--lengths", "24", "--seeds", "2",
              "--pairs", "2", "--n-boot", "10", "--fit-t-min", "4"],
    "train": ["train", "--depth", "1", "--d-model", "16", "--heads", "2", "--context", "16", "--batch-size", "2",
              "--steps", "40", "--warmup", "2", "--eval-every", "8", "--checkpoint-every", "4", "--log-every", "2"],
    "reproduce": ["reproduce", "--profile", "tiny", "--only", "relay_model", "--only", "direct_vs_relay", "--jobs", "2"],
}
TIMINGS = {"seconds", "wall_s", "tokens_per_s", "steps_per_s"}


def nohair(argv: list[str], out: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "nohair_jax.cli", *argv, "--out", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def untimed(x):
    """JSON without the keys that hold timings, at any depth."""
    if isinstance(x, dict):
        return {k: untimed(v) for k, v in x.items() if k not in TIMINGS}
    if isinstance(x, list):
        return [untimed(v) for v in x]
    return x


def results(kind: str, out: Path) -> dict:
    """What an interrupted run must end with, in a comparable form."""
    if kind == "reproduce":
        return untimed(json.loads((out / "claims.json").read_text()))
    if kind == "train":
        from flax import nnx

        from nohair_jax.train import load_trained

        params = {str(path): np.asarray(v.get_value()) for path, v in nnx.to_flat_state(nnx.state(load_trained(out)))}
        return dict(params=params, history=untimed(json.loads((out / "history.json").read_text())))
    cells = {}
    for path in sorted((out / "cells").iterdir()):
        if path.suffix == ".npz":
            with np.load(path) as data:
                cells[path.name] = {key: data[key] for key in data}
        else:
            cells[path.name] = untimed(json.loads(path.read_text()))
    return cells


def same(a, b) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True)
    return a == b


def stress(kind: str, stops: int, rng: random.Random, root: Path) -> dict:
    ref, run = root / f"{kind}_ref", root / f"{kind}_run"
    start = time.perf_counter()
    done = nohair(COMMANDS[kind], ref)
    _, err = done.communicate()
    assert done.returncode == 0, err[-2000:]
    duration = time.perf_counter() - start
    endings = collections.Counter()
    for _ in range(stops):
        sig = rng.choice([signal.SIGKILL, signal.SIGINT])
        proc = nohair(COMMANDS[kind], run)
        time.sleep(rng.uniform(0, duration))
        proc.send_signal(sig)
        _, err = proc.communicate()
        tracebacks = "Traceback" in err
        endings[f"{sig.name} -> exit {proc.returncode}{' (traceback)' if tracebacks else ''}"] += 1
    final = nohair(COMMANDS[kind], run)
    _, err = final.communicate()
    assert final.returncode == 0, err[-2000:]
    temporaries = sorted(str(p.relative_to(run)) for p in run.rglob(".*"))
    return dict(kind=kind, seconds=duration, endings=dict(endings), identical=same(results(kind, ref), results(kind, run)),
                temporaries=temporaries)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stops", type=int, default=10, help="random stops per command (default 10)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the moments and signals (default 0)")
    parser.add_argument("--commands", nargs="+", choices=sorted(COMMANDS), default=list(COMMANDS))
    args = parser.parse_args()
    rng = random.Random(args.seed)
    failed = []
    with tempfile.TemporaryDirectory() as root:
        for kind in args.commands:
            row = stress(kind, args.stops, rng, Path(root))
            endings = ", ".join(f"{n} x {how}" for how, n in sorted(row["endings"].items()))
            print(f"{kind:<10} uninterrupted {row['seconds']:5.1f} s; {args.stops} stops: {endings}; "
                  f"results identical: {row['identical']}; temporary files left: {row['temporaries'] or 'none'}",
                  flush=True)
            if not row["identical"] or row["temporaries"] or any("traceback" in how for how in row["endings"]):
                failed.append(kind)
    if failed:  # a check, not only a measurement: a stop that lost or changed results fails the run
        sys.exit(f"FAILED: {', '.join(failed)}")


if __name__ == "__main__":
    main()
