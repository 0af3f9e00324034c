"""The command line both calibration benchmarks share (power_law_calibration.py, judge_calibration.py)."""

from __future__ import annotations

import argparse
from pathlib import Path


def calibration_args(doc: str, script: str, harness, default_out: Path,
                     only: tuple[str, ...] = ()) -> tuple[argparse.Namespace, str]:
    """``--draws`` and ``--n-boot`` (defaults: the harness's ``BENCH_DRAWS``, ``N_BOOT``) and ``--out`` (the
    doc written); with ``only`` (names a run may be restricted to), ``--only NAME ...``; returns the arguments
    and the command that makes the same run, for the doc's header."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--draws", type=int, default=harness.BENCH_DRAWS)
    parser.add_argument("--n-boot", type=int, default=harness.N_BOOT)
    parser.add_argument("--out", type=Path, default=default_out)
    if only:
        parser.add_argument("--only", nargs="+", choices=only, default=list(only), metavar="NAME",
                            help=f"run only these (default: all of {', '.join(only)})")
    args = parser.parse_args()
    command = f"python benchmarks/{script}" + (
        "" if (args.draws, args.n_boot) == (harness.BENCH_DRAWS, harness.N_BOOT)
        else f" --draws {args.draws} --n-boot {args.n_boot}") + (
        f" --only {' '.join(args.only)}" if only and list(args.only) != list(only) else "")
    return args, command
