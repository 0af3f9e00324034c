"""The experiments, one script per claim or figure; installed as ``nohair_jax.experiments`` for ``nohair reproduce``.

Each module has ``PROFILES`` (smoke, quick, full) and ``run(profile, out, ...) -> dict``, and
runs on its own as ``python experiments/<name>.py`` with the command line of ``experiment_parser``.
"""

from __future__ import annotations

import argparse
import atexit
from pathlib import Path

from nohair_jax.model import untrained_model
from nohair_jax.pairs import random_prompt_pairs
from nohair_jax.results import FolderBusyError, folder_lock


def untrained_model_and_pairs(p: dict, depth: int, seed: int):
    """A profile's untrained model and its prompt pairs: ``model.untrained_model`` at ``depth``,
    width ``p["d_model"]``, init from ``seed``, with ``p["n_pairs"]`` random-token pairs of
    ``p["prompt_len"]`` + ``p["length"]`` tokens drawn from ``seed + 1``."""
    model = untrained_model(depth, d_model=p["d_model"], max_len=p["prompt_len"] + p["length"], seed=seed)
    return model, random_prompt_pairs(seed + 1, p["n_pairs"], p["prompt_len"], p["length"], model.config.vocab_size)


def experiment_parser(doc: str, name: str, profiles, *, seed: bool = True) -> argparse.ArgumentParser:
    """The command line every experiment script shares: ``--profile`` (one of ``profiles``, default
    quick), ``--out`` (default ``results/<name>``) and, when the experiment takes one, ``--seed``.
    Add the experiment's own arguments to the parser returned; read them with
    ``parse_experiment_args``."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", choices=profiles, default="quick")
    parser.add_argument("--out", type=Path, default=Path("results") / name)
    if seed:
        parser.add_argument("--seed", type=int, default=0)
    return parser


def parse_experiment_args(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """``parser.parse_args()``, then hold the lock of ``--out`` (``folder_lock``) until the script
    exits: one writer per folder, as for the ``nohair`` commands. A folder in use by another
    process is one line and exit 2, before anything is written."""
    args = parser.parse_args()
    lock = folder_lock(args.out)
    try:
        lock.__enter__()
    except FolderBusyError as err:
        parser.exit(2, f"{parser.prog}: error: --out {err}\n")
    atexit.register(lock.__exit__, None, None, None)
    return args
