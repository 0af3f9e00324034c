"""Interruptions that end a run cleanly: a signal becomes one ``KeyboardInterrupt`` where it lands,
or at the end of a block that must not be cut (``deferred``: a checkpoint being written).

Python reports a ``KeyboardInterrupt`` raised inside a finaliser (``__del__``), JAX's
garbage-collection callback or the import system's module-lock callback as an ignored exception,
with a traceback, and the run goes on. The handler here never raises there: it retries 10 ms later
(SIGALRM, the same handler), once the finaliser has returned. Every result file is written
atomically (``nohair_jax.results``), so an interrupted run leaves whole files and resumes on a rerun.
"""

from __future__ import annotations

import contextlib
import signal
import threading

# Where Python reports a KeyboardInterrupt and drops it: finalisers, JAX's gc callback, and the weakref
# callback ``cb`` that the import system runs when a module lock is freed.
_FINALISERS = ("__del__", "_xla_gc_callback", "cb")
_deferred = signal.SIGINT  # the signal a SIGALRM retry stands for


class Terminated(KeyboardInterrupt):
    """SIGTERM (a parent or the system stopping the run), raised as Ctrl-C is, so the same cleanup runs."""


def raise_interrupt(signum, frame) -> None:
    """Signal handler: KeyboardInterrupt (``Terminated`` for SIGTERM), deferred (SIGALRM in 10 ms) while a
    finaliser is running."""
    global _deferred
    if signum != signal.SIGALRM:
        _deferred = signum
    for _ in range(4):  # the innermost frames: a finaliser runs on top of whatever was running
        if frame is None:
            break
        if frame.f_code.co_name in _FINALISERS:
            signal.setitimer(signal.ITIMER_REAL, 0.01)
            return
        frame = frame.f_back
    raise Terminated if _deferred == signal.SIGTERM else KeyboardInterrupt


def interrupt_on(*signums: int) -> None:
    """Make each of ``signums`` (SIGINT for Ctrl-C, SIGTERM for a parent stopping a worker) raise
    KeyboardInterrupt through ``raise_interrupt``; SIGALRM carries the deferred retries."""
    for signum in (*signums, signal.SIGALRM):
        signal.signal(signum, raise_interrupt)


@contextlib.contextmanager
def deferred(signums: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)):
    """Hold ``signums`` until the block ends, then deliver the first that arrived to the handler
    that was in place (KeyboardInterrupt for Ctrl-C). For writes that a library would report with
    its own traceback when cut (orbax saving a checkpoint). Outside the main thread, where signal
    handlers cannot be changed, the block runs as is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []
    previous = {signum: signal.signal(signum, lambda signum, frame: arrived.append(signum)) for signum in signums}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if arrived:
            signal.raise_signal(arrived[0])
