"""Result files written whole or not at all, by one writer per folder.

Every writer goes through a temporary file in the destination folder and an atomic rename, so an
interrupted run never leaves a half-written result that a later run or a reader would trust;
``written_together`` makes several files one result set (a full disk leaves the old set whole);
``folder_lock`` keeps a second process out of a folder that one is writing.
"""

from __future__ import annotations

import contextlib
import fcntl
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


def _put_in_place(tmp: str, path: Path) -> None:
    """The one rename that publishes a finished temporary file, then the dead writers' leftovers go."""
    os.replace(tmp, path)
    _remove_stale_temporaries(path)


_GROUPS: list[list[tuple[str, Path]]] = []  # open ``written_together`` blocks, innermost last


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only if the block succeeds.

    The temporary file's name carries the writer's pid: a write killed outright (SIGKILL, where no
    ``finally`` runs) leaves it behind, and the next successful write of ``path`` removes it.
    Inside ``written_together`` the rename waits for the end of that block.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{os.getpid()}.", suffix=path.suffix)
    os.close(fd)
    try:
        try:
            yield Path(tmp)
        except OSError as err:
            if err.filename is None:  # a writer that does not say which file (numpy's savez): this one
                raise OSError(err.errno, err.strerror or str(err), str(path)) from err
            raise
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes files private; results are not
        if _GROUPS:
            _GROUPS[-1].append((tmp, path))
            return
        _put_in_place(tmp, path)
    finally:
        if not (_GROUPS and (tmp, path) in _GROUPS[-1]) and os.path.exists(tmp):
            os.remove(tmp)


@contextlib.contextmanager
def written_together() -> Iterator[None]:
    """Files written (through ``atomic_path``) inside the block replace their old versions together
    at its end, or, if anything in the block fails (a full disk, say), none of them does.

    For result sets read as one (an NPZ and the JSON that describes it): a failed write leaves
    the previous set whole, never a new NPZ beside an old JSON. The renames themselves need no
    space, so only a crash between them could split a set.
    """
    _GROUPS.append([])
    try:
        yield
    except BaseException:
        for tmp, _ in _GROUPS.pop():
            if os.path.exists(tmp):
                os.remove(tmp)
        raise
    for tmp, path in _GROUPS.pop():
        if _GROUPS:  # nested: the outer block decides
            _GROUPS[-1].append((tmp, path))
            continue
        _put_in_place(tmp, path)


class FolderBusyError(RuntimeError):
    """Another live process holds the folder's lock."""


LOCK_NAME = ".nohair.lock"


@contextlib.contextmanager
def folder_lock(folder: str | os.PathLike) -> Iterator[Path]:
    """Hold ``folder/.nohair.lock`` exclusively while the block runs: one writer per folder.

    A second process entering the same folder gets ``FolderBusyError`` naming the holder's pid,
    at once (it never waits, never interleaves files). The lock is the kernel's (``flock``), so a
    holder killed outright releases it with its last file descriptor; the lock file is removed
    on exit, and folders this call created are removed again if the block left them empty.
    """
    folder = Path(folder)
    created = [p for p in (folder, *folder.parents) if not p.exists()]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_NAME
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666 & ~_UMASK)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise FolderBusyError(f"{str(folder)!r} is in use by another nohair process (pid {holder}); "
                                  "wait for it to finish or choose another --out") from None
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:  # the previous holder removed the file between our open and flock
            same = False
        if same:
            break
        os.close(fd)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield folder
    finally:
        os.unlink(path)  # before the unlock: a process that opens the name from now on gets a new file
        os.close(fd)
        for p in created:  # innermost first
            try:
                p.rmdir()
            except OSError:  # not empty: the run wrote results there
                break


def jsonable(x: Any) -> Any:
    """numpy scalars and arrays to Python; non-finite floats to None (JSON has no NaN)."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def save_json(path: str | os.PathLike, data: dict) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(jsonable(data), indent=2) + "\n")
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
