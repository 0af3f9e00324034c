"""Tasks side by side, each in its own worker process on its own share of the CPUs.

``run_side_by_side(target, tasks, jobs=2, done=...)`` runs ``target(*args)`` for every task, at
most ``jobs`` at a time, each in a fresh spawned process (a fresh JAX, so nothing is shared but
the files) pinned to ``cpu_shares(jobs)[slot]`` before JAX starts its thread pool. Conventions:

- a worker dies with its parent (``PR_SET_PDEATHSIG``, Linux; elsewhere it may outlive a parent
  killed outright), so a killed run leaves no process writing into folders a rerun will use;
- a terminal's Ctrl-C reaches the parent only (workers ignore SIGINT); the parent stops running
  workers with SIGTERM, which they turn into KeyboardInterrupt (``interrupts``), and waits for
  them; so does any error in the parent;
- a worker exits without interpreter teardown once it has answered: a library's background
  thread (orbax's checkpoint writer) cannot print from a finaliser then;
- after a task fails no new task starts; the running ones finish, then the first failure (the
  worker's exception, pickled back) is raised in the parent.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
from typing import Any, Callable

from tqdm.auto import tqdm

from nohair_jax.interrupts import interrupt_on


def available_cpus() -> list[int]:
    """The CPUs this process may run on (all of ``os.cpu_count()`` where the platform cannot say)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def cpu_shares(jobs: int) -> list[set[int] | None]:
    """The CPUs of each of ``jobs`` workers: this process's CPUs dealt out in turn (None where the
    platform cannot pin a process, or there are fewer CPUs than workers)."""
    cpus = available_cpus()
    if not hasattr(os, "sched_setaffinity") or len(cpus) < jobs:
        return [None] * jobs
    return [set(cpus[i::jobs]) for i in range(jobs)]


def _die_with_parent(parent: int) -> None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError, TypeError):  # no prctl here (not Linux): the worker may outlive a killed parent
        return
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def _worker(target: Callable, args: tuple, cpus: set[int] | None, parent: int, reply) -> None:
    """One task in a worker process: sends target(*args) or the exception, then exits at once."""
    _die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    interrupt_on(signal.SIGTERM)
    if cpus:
        os.sched_setaffinity(0, cpus)
    tqdm.set_lock(threading.RLock())  # not tqdm's default semaphore, which an exit without teardown would leak
    code = 0
    try:
        reply.send(target(*args))
    except KeyboardInterrupt:
        code = 130
    except BaseException as err:  # noqa: BLE001  handed to the parent, which raises it
        try:
            reply.send(err)
        except Exception:  # an exception that does not pickle: its text
            reply.send(RuntimeError(f"{type(err).__name__}: {err}"))
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run_side_by_side(target: Callable, tasks: list[tuple[str, tuple]], *, jobs: int,
                     done: Callable[[str, Any], None]) -> None:
    """Run ``target(*args)`` for each ``(label, args)`` of ``tasks`` in worker processes, at most
    ``jobs`` at once, in the order given. ``target`` is a module-level function (spawned workers
    import it); ``done(label, answer)`` is called in this process as each task ends, ``answer``
    its return value or the exception it raised."""
    ctx = multiprocessing.get_context("spawn")
    shares, queue, failure = cpu_shares(jobs), list(tasks), None
    running: dict = {}  # answer pipe -> (label, process, slot)
    try:
        while queue or running:
            while queue and len(running) < jobs and failure is None:
                (label, args), slot = queue.pop(0), min(set(range(jobs)) - {slot for _, _, slot in running.values()})
                receive, send = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_worker, args=(target, args, shares[slot], os.getpid(), send),
                                   name=f"nohair-{label}", daemon=True)
                proc.start()
                send.close()  # the worker holds the only writing end: its exit reads as EOF here
                running[receive] = (label, proc, slot)
            if not running:
                break
            for receive in multiprocessing.connection.wait(list(running)):  # an answer, or EOF from a dead worker
                label, proc, _ = running.pop(receive)
                try:
                    answer = receive.recv()
                except EOFError:
                    answer = RuntimeError(f"{label}: its process ended (exit code {proc.exitcode}) without an answer")
                receive.close()
                proc.join()
                if isinstance(answer, BaseException):
                    failure = failure or answer
                done(label, answer)
    finally:  # Ctrl-C or an error here: stop the workers and wait for them
        for _, proc, _ in running.values():
            proc.terminate()
        for _, proc, _ in running.values():
            proc.join(timeout=60)
            if proc.is_alive():
                proc.kill()
                proc.join()
    if failure is not None:
        raise failure


__all__ = ["available_cpus", "cpu_shares", "run_side_by_side"]
