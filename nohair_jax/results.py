"""Result files written whole or not at all.

Every writer goes through a temporary file in the destination folder and an atomic rename, so an
interrupted run never leaves a half-written result that a later run or a reader would trust.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator

import numpy as np

_UMASK = os.umask(0)
os.umask(_UMASK)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def _remove_stale_temporaries(path: Path) -> None:
    """Remove the temporary files that killed writers of ``path`` left (``.<name>.<pid>.*``, pid not alive)."""
    for stale in path.parent.glob(f".{glob.escape(path.name)}.*"):
        pid = stale.name[len(path.name) + 2:].split(".", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            stale.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only if the block succeeds.

    The temporary file's name carries the writer's pid: a write killed outright (SIGKILL, where no
    ``finally`` runs) leaves it behind, and the next successful write of ``path`` removes it.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{os.getpid()}.", suffix=path.suffix)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes files private; results are not
        os.replace(tmp, path)
        _remove_stale_temporaries(path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _jsonable(x: Any) -> Any:
    """numpy scalars and arrays to Python; non-finite floats to None (JSON has no NaN)."""
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def save_json(path: str | os.PathLike, data: dict) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(_jsonable(data), indent=2) + "\n")
    return Path(path)


def load_json(path: str | os.PathLike) -> dict:
    return json.loads(Path(path).read_text())


def save_npz(path: str | os.PathLike, **arrays) -> Path:
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            np.savez_compressed(f, **arrays)
    return Path(path)


def save_figure(path: str | os.PathLike, fig) -> Path:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, bbox_inches="tight", format=Path(path).suffix.lstrip(".") or "png")
    return Path(path)


def experiment_parser(doc: str, name: str, profiles, *, seed: bool = True) -> argparse.ArgumentParser:
    """The command line every experiment script shares: ``--profile`` (one of ``profiles``, default
    quick), ``--out`` (default ``results/<name>``) and, when the experiment takes one, ``--seed``.
    Add the experiment's own arguments to the parser returned."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", choices=profiles, default="quick")
    parser.add_argument("--out", type=Path, default=Path("results") / name)
    if seed:
        parser.add_argument("--seed", type=int, default=0)
    return parser
