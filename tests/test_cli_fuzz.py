"""Random command lines and random small files thrown at the CLI.

Every command starts from a tiny valid command line; hypothesis then sets one to three of the
command's own options (read from the parser, so a new option is fuzzed without editing this file)
to values drawn from numbers that break things (0, -1, nan, inf, 1e400, 10^20), text, the option's
choices, and paths to random small files, folders with a random ``config.json``, or nothing.
The property: the exit code is 0 or 2, stderr holds no traceback, and ``--out`` holds nothing
unless the run succeeded. A run still going after a few seconds is valid input that is merely
slow (``--steps 10^20``); it is stopped and not judged. Derandomized: CI runs the same examples.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import signal
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from nohair_jax.cli import build_parser, main

TINY_MODEL = ["--depth", "1", "--d-model", "16", "--heads", "2"]
BASE = {
    "offsets": [*TINY_MODEL, "--prompt-len", "2", "--length", "24", "--pairs", "2", "--n-boot", "10", "--fit-t-min", "4"],
    "bound": [*TINY_MODEL, "--prompt-len", "2", "--length", "24", "--pairs", "2", "--n-boot", "10"],
    "train": [*TINY_MODEL, "--steps", "2", "--batch-size", "2", "--context", "16", "--warmup", "1", "--eval-every", "2",
              "--checkpoint-every", "2", "--log-every", "1"],
    "sweep": ["--depths", "1", "--widths", "16", "--prompt-lens", "2", "--lengths", "24", "--seeds", "1", "--pairs", "2",
              "--n-boot", "10", "--fit-t-min", "4"],
    "dynamics": ["--gain", "1", "--draws", "2", "--n", "4", "--d", "3", "--steps", "10"],
    "reproduce": ["--profile", "tiny", "--only", "relay_model"],
}
FILE_OPTIONS = {"--corpus", "--continuation-file", "--checkpoint"}
NUMBERS = ["0", "-1", "1", "2", "3", "0.5", "-0.0", "nan", "inf", "-inf", "1e400", "100000000000000000000", "1_0", "0x10"]
SLOW_S = 6


def _options(command: str) -> list[argparse.Action]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return [a for a in sub.choices[command]._actions if a.option_strings and a.dest not in ("help", "out")]


class _Slow(BaseException):
    """Raised by the alarm: valid input, merely slow (BaseException, so no handler swallows it)."""


@st.composite
def command_lines(draw, root: Path):
    command = draw(st.sampled_from(sorted(BASE)))
    argv = [command, *BASE[command]]
    for action in draw(st.lists(st.sampled_from(_options(command)), min_size=1, max_size=3)):
        flag = action.option_strings[-1]
        if action.nargs == 0:  # store_true
            argv.append(flag)
            continue
        if flag in FILE_OPTIONS:
            kind = draw(st.sampled_from(["bytes", "missing", "folder"]))
            path = root / f"in{len(argv)}"
            if kind == "bytes":
                path.write_bytes(draw(st.binary(max_size=300)))
            elif kind == "folder":
                path.mkdir()
                (path / "config.json").write_text(draw(st.text(max_size=80)))
            values = [str(path)]
        else:
            pool = st.sampled_from(NUMBERS) | st.text(max_size=6)
            if action.choices:
                pool = st.sampled_from(list(action.choices)) | pool
            count = 1 if action.nargs in (None, "?") else draw(st.integers(1, 2))
            values = [draw(pool) for _ in range(count)]
        argv += [flag, *values]
    return argv


@settings(max_examples=10, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data())
def test_random_command_lines_exit_0_or_2_without_traceback_or_leftovers(data):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        argv = data.draw(command_lines(root))
        out = root / "out"
        err = io.StringIO()

        def slow(*_):
            raise _Slow

        previous = signal.signal(signal.SIGALRM, slow)
        signal.alarm(SLOW_S)
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                try:
                    code = main([*argv, "--out", str(out)])
                except SystemExit as exc:  # argparse's own errors
                    code = exc.code
        except _Slow:
            event("stopped: still running")  # valid and slow: not judged
            return
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
        text = err.getvalue()
        event(f"{argv[0]} exit {code}")
        assert code in (0, 2), (argv, code, text[-2000:])
        assert "Traceback" not in text, (argv, text[-2000:])
        if code == 2:
            assert not out.exists(), (argv, sorted(p.name for p in out.rglob("*")))
