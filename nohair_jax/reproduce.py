"""``nohair reproduce``: every experiment of the project, one folder, one report that answers every claim.

A *part* is one experiment module of ``nohair_jax.experiments`` run at a profile with settings;
each module declares its part and what every reproduction profile runs (``nohair_jax.parts``,
which finds them: there is no list of parts here). Each part writes into ``<out>/<part>/`` and
is skipped on a rerun when it finished with the same configuration; a changed configuration
starts it again from an empty folder, so no result is silently stale. A part that was
interrupted with the same configuration resumes in its folder (training runs continue from
their last checkpoint).

A *claim* is one sentence of the two papers with the criterion it is judged by and a judge that
reads the parts' summaries (``nohair_jax.claims``). The report (``nohair_jax.report``:
``report.md``, ``report.html`` with the figures embedded) opens with the claims table, then each
claim's criterion in words and the figures that show its evidence; ``claims.json`` is the same
table for programs, with the numbers each verdict was computed from.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import sys
import time
import traceback
from pathlib import Path

from tqdm.auto import tqdm

from nohair_jax.claims import NOT_MEASURED, VERDICTS, Claim, SummaryError, check_summary, judge_claims
from nohair_jax.parts import PROFILES, Part, experiment, find_part, find_parts, part_names
from nohair_jax.report import write_report
from nohair_jax.results import load_json, save_json
from nohair_jax.workers import run_side_by_side


@functools.cache
def all_claims() -> tuple[Claim, ...]:
    """Every claim and check, in report order: each part's own ``CLAIMS``, beside its experiment
    (imported here, not with this module: ``nohair --help`` lists the parts without loading JAX)."""
    return tuple(c for part in find_parts() for c in getattr(experiment(part.name), "CLAIMS", ()))


def load_summary(part: Part, out: Path) -> dict:
    """The part's saved summary, held to its experiment's ``Summary`` type where its claims read one
    (``claims.check_summary``: ``SummaryError`` names the file and the key that does not match)."""
    path = out / part.name / part.summary
    summary = load_json(path)
    schema = getattr(experiment(part.name), "Summary", None)
    if schema is not None:
        check_summary(schema, summary, str(path))
    return summary


def _saved_summary(part: Part, out: Path) -> dict | None:
    """``load_summary``, or None where the saved summary is of an earlier version of the part (it runs again)."""
    try:
        return load_summary(part, out)
    except SummaryError:
        return None


def part_config(name: str, profile: str) -> dict:
    """Everything that determines a part's results: the experiment, its profile and resolved settings."""
    exp_profile, settings = find_part(name).plan(profile)
    base = experiment(name).PROFILES[exp_profile]
    unknown = sorted(set(settings) - set(base))
    if unknown:
        raise ValueError(f"part {name!r}: settings {unknown} are not settings of its {exp_profile!r} profile {sorted(base)}")
    resolved = dict(base, **settings)
    return json.loads(json.dumps(dict(part=name, profile=exp_profile, settings=resolved, seed=0)))


def finished_part(part: Part, profile: str, out: Path, *, force: bool = False) -> tuple[dict | None, str] | None:
    """(summary, what happened) for a part that need not run: it cannot run here (``available()``
    gives the reason: a model file that is not installed; summary None, its claims not measured)
    or it already finished with this configuration. None when it has to run."""
    available = getattr(experiment(part.name), "available", None)
    reason = available() if available else None
    if reason:
        return None, f"not run: {reason}"
    if not force and _finished_with_config(part, profile, out) and (summary := _saved_summary(part, out)) is not None:
        return summary, "reused"
    return None


def _finished_with_config(part: Part, profile: str, out: Path) -> bool:
    done = out / part.name / "part.json"
    return done.exists() and load_json(done)["config"] == part_config(part.name, profile)


def run_part(part: Part, profile: str, out: Path, *, force: bool = False, log: bool = False) -> tuple[dict | None, str]:
    """Run one part unless ``finished_part`` says it need not; returns (summary, what happened).

    ``log``: the experiment's output (its progress bars) goes to ``<out>/<part>/log.txt``
    instead of the terminal, which parts running side by side would garble.
    """
    finished = finished_part(part, profile, out, force=force)
    if finished:
        return finished
    folder = out / part.name
    config = part_config(part.name, profile)
    started = folder / "started.json"
    if force or not (started.exists() and load_json(started) == config):
        shutil.rmtree(folder, ignore_errors=True)  # another configuration's files must not leak in
    save_json(started, config)
    start = time.perf_counter()
    with _output_to(folder / "log.txt") if log else contextlib.nullcontext():
        experiment(part.name).run(config["profile"], folder, settings=config["settings"])
    save_json(folder / "part.json", dict(config=config, wall_s=time.perf_counter() - start))
    return load_summary(part, out), f"ran in {time.perf_counter() - start:.0f} s"


@contextlib.contextmanager
def _output_to(path: Path):
    """Send this process's stdout and stderr (the file descriptors, so C libraries' too) to ``path``."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(path, "ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield
        except Exception:
            traceback.print_exc()  # into the log; the exception goes on to the caller
            raise
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, copy in zip((1, 2), saved):
                os.dup2(copy, fd)
                os.close(copy)


def _run_part_in_worker(name: str, profile: str, out: str, force: bool) -> tuple[dict | None, str]:
    """``run_part`` by name, in a worker process (``workers.run_side_by_side``), its output in its log."""
    return run_part(find_part(name), profile, Path(out), force=force, log=True)


def run_parts(parts: list[Part], profile: str, out: Path, *, force: bool, jobs: int, report) -> None:
    """Run ``parts`` side by side, at most ``jobs`` at once, each in its own process on its share of
    the CPUs (``workers.run_side_by_side``); ``report(part, (summary, status))`` is called here as
    each finishes, and they start longest first (``Part.seconds``). After a part fails no new part
    starts; the running ones finish and the first failure is raised here."""
    by_name = {part.name: part for part in parts}

    def done(name: str, answer) -> None:
        if isinstance(answer, BaseException):
            tqdm.write(f"{name}: failed; its output is in {out / name / 'log.txt'}")
        else:
            report(by_name[name], answer)

    longest_first = sorted(parts, key=lambda part: -part.seconds)  # stable: report order among equals
    tasks = [(part.name, (part.name, profile, str(out), force)) for part in longest_first]
    run_side_by_side(_run_part_in_worker, tasks, jobs=jobs, done=done)


def reproduce(out: str | Path, *, profile: str = "quick", only: tuple[str, ...] = (), force: bool = False,
              jobs: int = 1) -> list[dict]:
    """Run every part (or ``only`` these) at ``profile``, then write the report; returns the claims table.

    Parts already finished under ``out`` with the same configuration are reused; the report
    covers every part found finished in ``out`` with the current configuration. ``jobs`` > 1 runs
    that many parts at once, each in its own process on its share of the CPUs, its output in
    ``<out>/<part>/log.txt`` (``run_parts``): two trainings side by side on one core each get
    through more steps than one after another on two, as XLA's small matmuls do not use two
    cores fully.
    """
    out = Path(out)
    unknown = [name for name in only if name not in part_names()]
    if unknown:
        raise ValueError(f"unknown part(s) {unknown}; the parts are {list(part_names())}")
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; choose one of {list(PROFILES)}")
    if not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be a positive integer, got {jobs!r}")
    every = find_parts()
    selected = [p for p in every if not only or p.name in only]
    summaries, statuses = {}, {}
    bar = tqdm(total=len(selected), desc="reproduce", unit="part")

    def report(part: Part, result: tuple[dict | None, str]) -> None:
        summary, status = result
        if summary is not None:
            summaries[part.name] = summary
        statuses[part.name] = status + _config_text(part_config(part.name, profile))
        tqdm.write(f"{part.name}: {status}")
        bar.update()

    try:
        if jobs == 1:
            for part in selected:
                bar.set_postfix_str(part.name)
                report(part, run_part(part, profile, out, force=force))
        else:
            to_run = []
            for part in selected:
                finished = finished_part(part, profile, out, force=force)
                if finished:
                    report(part, finished)
                else:
                    to_run.append(part)
            bar.set_postfix_str(f"{len(to_run)} parts, {jobs} at a time")
            run_parts(to_run, profile, out, force=force, jobs=jobs, report=report)
    finally:
        bar.close()  # now, not when an exception's frames are freed, after the caller's last word
    for part in every:  # parts from an earlier run with the current configuration count too
        if part.name not in summaries and _finished_with_config(part, profile, out) and (
                summary := _saved_summary(part, out)) is not None:
            summaries[part.name] = summary
            statuses[part.name] = "from an earlier run" + _config_text(part_config(part.name, profile))
    return write_report(out, profile, every, all_claims(), summaries, statuses)


def _config_text(config: dict) -> str:
    """"; experiment profile quick: k=v, ..." for a status line."""
    settings = ", ".join(f"{k}={v}" for k, v in config["settings"].items())
    return f"; experiment profile {config['profile']}: {settings}"


__all__ = ["NOT_MEASURED", "PROFILES", "VERDICTS", "Claim", "Part", "SummaryError", "all_claims", "finished_part",
           "judge_claims", "load_summary", "part_config", "reproduce", "run_part", "run_parts", "write_report"]
