"""Is the stopping rule strict enough? One configuration trained to the rule's stop, then twice as long.

``nohair_jax.plateau`` stops a small model's training when its held-out loss levelled off. Here the
full profile's model of the training rows (``experiments.SMALL_TRAINING``; seed 0, no logit bias unless
``--gamma``) is trained in doubling stages to the rule's stop at S steps, its offsets are measured on held-out text pairs
and alpha is fitted per layer on the claims' window (t in [32, C - P], inside the training context),
with 95 % t-intervals over pairs; then the same run is continued to 2 S steps (in a copy of the run's
folder, so the stopped run stays as it was) and measured again on the same pairs. Printed as markdown
(and written as JSON): the stages with their drops per doubling, both alphas of every layer side by side,
whether the second lies inside the first's interval, and the paired interval of their difference.

    python benchmarks/plateau.py                       # the benchmark: about 90 minutes (stop at 51,200)
    python benchmarks/plateau.py --smoke               # tiny sizes, 1 to 2 minutes: the code path only
    python benchmarks/plateau.py --throughput          # CPU seconds per training step at candidate sizes
    python benchmarks/plateau.py --set d_model=32 --out results/plateau_d32   # another candidate profile

Its time: 2 S training steps at about 0.05 CPU seconds each with the evaluations (width 64, depth 2, one
core) and a compilation per stage: about 90 minutes where the rule stops the full profile's model, at
S = 51,200 (docs/benchmarks.md). Resumable: the training runs resume from their
checkpoints and finished measurements are read back from ``--out``. ``--throughput`` times ``train.train``
on one core (this process pinned to it, as ``nohair reproduce --jobs 2`` pins each part) in CPU seconds,
which a busy machine inflates less than wall time, at each size of ``THROUGHPUT_GRID``, and one offsets
measurement per width and depth.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import jax
import numpy as np
from flax import nnx

import nohair_jax as nh
from nohair_jax.config import PromptLogitBias, default_config
from nohair_jax.experiments import trained_vs_untrained
from nohair_jax.fit import paired_difference_or_refuse
from nohair_jax.plateau import MAX_DROP, levelled_off, stage_ends
from nohair_jax.staged import STAGE_KEYS, staged_config, train_to, train_until_levelled
from nohair_jax.results import save_json, save_npz
from nohair_jax.train import TrainConfig, bits_per_byte, eval_windows, train

# The full profile of the small trained models (trained_vs_untrained, logit_bias): the model, its training in
# doubling stages from `first` to at most `max_steps`, and the offsets measured after it.
FULL = trained_vs_untrained.PROFILES["full"]
SMOKE = dict(d_model=16, depth=2, context=96, batch_size=2, lr=2e-3, warmup_steps=4, eval_every=4, eval_windows=8,
             first=56, max_steps=112, prompt_len=4, length=128, n_pairs=3)
THROUGHPUT_GRID = dict(d_model=(64, 128), depth=(2, 4), context=(128, 256), batch_size=(8, 16))
T_MIN = 32  # the claims' window: t in [T_MIN, C - P]


def train_config(p: dict, seed: int) -> TrainConfig:
    """The staged training of profile ``p`` (``staged.staged_config``)."""
    return staged_config(**{k: p[k] for k in STAGE_KEYS}, seed=seed)


def model_config(p: dict, gamma: float | None):
    bias = None if gamma is None else PromptLogitBias(p["prompt_len"], gamma)
    return default_config(p["depth"], d_model=p["d_model"], position="rope", prompt_logit_bias=bias)


def measured(model, pairs, p: dict, path: Path) -> dict:
    """Offsets of ``model`` on ``pairs`` (saved to ``path``, read back where already there): the curves and,
    per layer, alpha on the claims' window t in [T_MIN, C - P] and on t in [T_MIN, T] (extrapolated)."""
    if not path.exists():
        m = nh.measure(model, pairs)
        save_npz(path, **m.arrays())
    with np.load(path) as data:
        t, l2, floor = data["t"], data["l2"], data["floor"]
    inside = nh.fit_layers(t, l2, floor, t_min=T_MIN, t_max=p["context"] - p["prompt_len"])
    beyond = nh.fit_layers(t, l2, floor, t_min=T_MIN)
    return dict(t=t, l2=l2, floor=floor, inside=inside, beyond=beyond)


def compare(first: dict, second: dict, p: dict) -> list[dict]:
    """Per layer: both in-context alphas, whether the second lies inside the first's interval, and the paired
    interval of second - first (the same pairs measured twice)."""
    rows = []
    for layer, (a, b) in enumerate(zip(first["inside"], second["inside"]), start=1):
        diff = paired_difference_or_refuse(first["t"], second["l2"][:, layer], first["l2"][:, layer], t_min=T_MIN,
                                           t_max=p["context"] - p["prompt_len"], floor_a=second["floor"][layer],
                                           floor_b=first["floor"][layer])
        ci = getattr(a, "ci", None)
        inside = None if ci is None or not hasattr(b, "alpha") else bool(ci[0] <= b.alpha <= ci[1])
        rows.append(dict(layer=layer, at_stop=a.to_dict(), doubled=b.to_dict(), inside_interval=inside,
                         difference=diff.to_dict(), beyond_at_stop=first["beyond"][layer - 1].to_dict(),
                         beyond_doubled=second["beyond"][layer - 1].to_dict()))
    return rows


def run(p: dict, out: Path, gamma: float | None, progress: bool) -> dict:
    corpus = nh.stdlib_corpus()
    pairs = nh.heldout_prompt_pairs(corpus, 1, p["n_pairs"], p["prompt_len"], p["length"])
    cfg, mcfg = train_config(p, seed=0), model_config(p, gamma)
    start = time.perf_counter()
    result, verdict = train_until_levelled(mcfg, cfg, corpus, out / "run", first=p["first"], max_steps=p["max_steps"],
                                           progress=progress)
    stop = verdict.step
    at_stop = measured(result.model, pairs, p, out / f"offsets_step{stop}.npz")
    trained_s = time.perf_counter() - start
    if not (out / "doubled").exists():  # a copy: the stopped run stays as it was; copied whole or not at all
        shutil.rmtree(out / "doubled.partial", ignore_errors=True)
        shutil.copytree(out / "run", out / "doubled.partial")
        os.replace(out / "doubled.partial", out / "doubled")
    doubled_result = train_to(mcfg, cfg, corpus, out / "doubled", 2 * stop, progress=progress)
    doubled = measured(doubled_result.model, pairs, p, out / f"offsets_step{2 * stop}.npz")
    history = doubled_result.history
    stages = [levelled_off([e for e in history if e["step"] <= end]).to_dict()
              for end in stage_ends(p["first"], 2 * stop)]
    return dict(settings=p, gamma=gamma, stop=verdict.to_dict(), stages=stages, layers=compare(at_stop, doubled, p),
                seconds=dict(to_stop_and_measured=trained_s, total=time.perf_counter() - start))


def markdown(summary: dict) -> str:
    p, stop = summary["settings"], summary["stop"]
    bias = "no logit bias" if summary["gamma"] is None else f"logit bias gamma {summary['gamma']:g}"
    lines = ["# The stopping rule, trained to the stop and twice as long", "",
             f"d_model {p['d_model']}, depth {p['depth']}, context {p['context']}, batch {p['batch_size']}, "
             f"lr {p['lr']:g} constant after {p['warmup_steps']} warm-up steps, {bias}, seed 0; stages from "
             f"{p['first']} steps, budget {p['max_steps']}; held-out evaluation of {p['eval_windows']} windows every "
             f"{p['eval_every']} steps; {p['n_pairs']} held-out text pairs, P = {p['prompt_len']}, T = {p['length']}. "
             f"Rule: drop per doubling below {MAX_DROP:g} bits per byte, one-sided 95 % upper bound below "
             f"{2 * MAX_DROP:g}.", "",
             f"**Stop: {stop['step']} steps** ({stop['reason']}).", "",
             "| stage end | held-out bits per byte | drop per doubling | SE | upper bound | evaluations | levelled |",
             "|---|---|---|---|---|---|---|"]
    for s in summary["stages"]:
        number = lambda key, spec: "" if s[key] is None else format(s[key], spec)
        lines.append(f"| {s['step']} | {number('bits', '.4f')} | {number('drop', '+.4f')} | "
                     f"{number('standard_error', '.4f')} | {number('upper', '+.4f')} | {s['n_evals']} | "
                     f"{'yes' if s['levelled'] else 'no'} |")
    window = f"[{T_MIN}, {p['context'] - p['prompt_len']}]"
    lines += ["", f"alpha on t in {window} (the claims' window, inside the training context), 95 % t-intervals over "
              "pairs:", "", f"| layer | at the stop ({stop['step']}) | twice as long ({2 * stop['step']}) | inside the "
              "first's interval | difference, paired | beyond the context (t to T), at the stop / doubled |",
              "|---|---|---|---|---|---|"]
    for row in summary["layers"]:
        brief = lambda saved: nh.fit_from_dict(saved).brief()
        inside = {True: "yes", False: "**no**", None: "no interval"}[row["inside_interval"]]
        lines.append(f"| {row['layer']} | {brief(row['at_stop'])} | {brief(row['doubled'])} | {inside} | "
                     f"{brief(row['difference'])} | {brief(row['beyond_at_stop'])} / {brief(row['beyond_doubled'])} |")
    every = all(row["inside_interval"] for row in summary["layers"])
    lines += ["", f"Every layer's alpha twice as long lies inside its interval at the stop: "
              f"**{'yes' if every else 'no'}**.",
              f"Wall time: {summary['seconds']['to_stop_and_measured'] / 60:.1f} min to the stop and its measurement, "
              f"{summary['seconds']['total'] / 60:.1f} min in all (this call; a resumed call counts only its own work)."]
    return "\n".join(lines)


def throughput(p: dict, cpu: int) -> list[dict]:
    """CPU seconds per training step (``train.train``, one core) at every size of the grid, one held-out evaluation
    of ``p["eval_windows"]`` windows, and one offsets measurement (``p["n_pairs"]`` pairs of ``p["length"]``
    tokens, the float32 floor on 2 of them) per width and depth."""
    corpus = nh.stdlib_corpus()
    rows = []

    def clock(model, step):
        jax.block_until_ready(nnx.state(model))
        return {"cpu_s": time.process_time()}

    for d, depth, context, batch in itertools.product(*THROUGHPUT_GRID.values()):
        tokens_per_step = batch * context * (12 * depth * d * d + 2 * depth * context * d + 512 * d)
        steps = int(min(200, max(12, 6 / (0.045 * tokens_per_step / (1024 * 163840)))))  # about 6 s of CPU each
        mcfg = default_config(depth, d_model=d, position="rope")
        cfg = TrainConfig(steps=steps + 1, batch_size=batch, context=context, warmup_steps=2, final_lr_fraction=1.0,
                          eval_every=steps + 1, checkpoint_every=steps + 1, log_every=1)
        with tempfile.TemporaryDirectory() as tmp:
            result = train(mcfg, cfg, corpus, tmp, progress=False, callbacks=[((3, steps), clock)])
        first, last = [e["cpu_s"] for e in result.history if "cpu_s" in e]
        windows = eval_windows(corpus.heldout, context, p["eval_windows"] // batch * batch)
        bits_per_byte(result.model, windows, batch_size=batch)  # compiled here
        before = time.process_time()
        bits_per_byte(result.model, windows, batch_size=batch)
        row = dict(d_model=d, depth=depth, context=context, batch_size=batch, cpu_s_per_step=(last - first) / (steps - 3),
                   eval_cpu_s=time.process_time() - before, eval_windows=len(windows))
        if context == THROUGHPUT_GRID["context"][0] and batch == THROUGHPUT_GRID["batch_size"][0]:
            pairs = nh.heldout_prompt_pairs(corpus, 1, p["n_pairs"], p["prompt_len"], p["length"])
            before = time.process_time()
            nh.measure(result.model, pairs)
            row["measure_cpu_s"] = time.process_time() - before
        row["load"] = os.getloadavg()[0]
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def throughput_markdown(rows: list[dict], p: dict, cpu: int) -> str:
    lines = [f"CPU seconds on core {cpu} (pinned), `train.train`, RoPE, pre-LN, lr constant; evaluation: "
             f"{p['eval_windows']} held-out windows; measurement: `nh.measure`, {p['n_pairs']} text pairs, P = "
             f"{p['prompt_len']}, T = {p['length']}, the float32 floor on 2 (compilation included).", "",
             "| d_model | depth | context | batch | CPU s / step | steps / CPU s | tokens / CPU s | one evaluation, CPU s | "
             "one measurement, CPU s | load |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        measure_s = f"{r['measure_cpu_s']:.1f}" if "measure_cpu_s" in r else ""
        lines.append(f"| {r['d_model']} | {r['depth']} | {r['context']} | {r['batch_size']} | {r['cpu_s_per_step']:.3f} | "
                     f"{1 / r['cpu_s_per_step']:.1f} | {r['batch_size'] * r['context'] / r['cpu_s_per_step']:,.0f} | "
                     f"{r['eval_cpu_s']:.2f} | {measure_s} | {r['load']:.1f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: the code path only, no finding")
    parser.add_argument("--throughput", action="store_true", help="time training at the candidate sizes instead")
    parser.add_argument("--gamma", type=float, default=None, help="train with the prompt logit bias at this gamma")
    parser.add_argument("--cpu", type=int, default=0, help="--throughput: the core to pin to")
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE",
                        help="change settings of the profile, to size another one (d_model=32 lr=0.003)")
    parser.add_argument("--out", type=Path, default=None, help="folder (default results/plateau_benchmark[_smoke])")
    args = parser.parse_args()
    p = dict(SMOKE if args.smoke else FULL)
    for item in args.set:
        key, _, value = item.partition("=")
        numbers = sorted(k for k, v in p.items() if isinstance(v, (int, float)))
        try:
            p[key] = type(p[key])(float(value))
        except (KeyError, ValueError):
            parser.error(f"--set {item}: expected KEY=NUMBER with KEY one of {numbers}")
    out = args.out or Path("results") / ("plateau_benchmark" + ("_smoke" if args.smoke else ""))
    out.mkdir(parents=True, exist_ok=True)
    if args.throughput:
        os.sched_setaffinity(0, {args.cpu})  # before JAX starts its threads: one core, as a part under --jobs 2
        if args.smoke:
            THROUGHPUT_GRID.update(d_model=(16,), depth=(2,), context=(96,), batch_size=(2,))
        rows = throughput(p, args.cpu)
        text = throughput_markdown(rows, p, args.cpu)
        save_json(out / "throughput.json", dict(settings=p, rows=rows))
    else:
        summary = run(p, out, args.gamma, progress=True)
        text = markdown(summary)
        save_json(out / "plateau.json", summary)
    print(text)
    (out / ("throughput.md" if args.throughput else "plateau.md")).write_text(text + "\n")


if __name__ == "__main__":
    main()
