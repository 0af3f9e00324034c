"""The experiments, one script per claim or figure; installed as ``nohair_jax.experiments`` for ``nohair reproduce``.

Each module has ``PROFILES`` (smoke, quick, full) and ``run(profile, out, ...) -> dict``, and
runs on its own as ``python experiments/<name>.py`` with the command line of ``experiment_parser``.
"""

from __future__ import annotations

import argparse
import atexit
from pathlib import Path

import numpy as np

from nohair_jax.criteria import RISE_T_MIN  # where the rise is measured, as its criterion states
from nohair_jax.model import model_skeleton, untrained_model
from nohair_jax.pairs import random_prompt_pairs
from nohair_jax.results import FolderBusyError, folder_lock, load_json, save_json

REAL_MODEL = "smollm2-135m"  # the packaged real model the real-model experiments measure


def real_model_available() -> str | None:
    """None when the packaged real model is installed, else why not (with the pip command)."""
    from nohair_jax.checkpoints import CheckpointError, packaged_model_path

    try:
        packaged_model_path(REAL_MODEL)
    except CheckpointError as err:
        return str(err)
    return None


def relay_alphas(prompt_len: int, length: int, fits, t_min: int) -> list[float]:
    """The solvable relay model's alpha per layer (``relay.offsets`` at the same P, T and depth),
    each fitted on the window of the measured layer's fit (``[t_min, T]`` where it was refused):
    the theory's prediction beside a measurement."""
    import nohair_jax as nh

    relay = np.asarray(nh.relay.offsets(prompt_len, length, len(fits)))
    t = np.arange(1, length + 1)
    windows = [f.t_range if isinstance(f, nh.PowerLawFit) else (t_min, length) for f in fits]
    return [nh.fit_power_law(t, relay[layer], t_min=w[0], t_max=w[1], n_boot=0).alpha
            for layer, w in enumerate(windows, start=1)]


def exponent_rise(t, l2_layer, prompt_len: int, layer: int, groups=None) -> dict:
    """The network's rise of the local exponent at one layer (``fit.local_exponent_rise`` of
    ``l2_layer [n_pairs, T]`` from ``RISE_T_MIN``) and the relay model's on the same grid of t:
    ``dict(rise=ExponentRise dict, relay_rise=float)``, what the claims on the rise read."""
    import nohair_jax as nh

    t_grid, _ = nh.local_exponent(t, l2_layer, t_min=RISE_T_MIN)
    relay = np.asarray(nh.relay.local_exponent(prompt_len, t_grid, layer))
    return dict(rise=nh.local_exponent_rise(t, l2_layer, t_min=RISE_T_MIN, groups=groups).to_dict(),
                relay_rise=float(nh.quarter_rise(relay)))


def real_model_at_init(cfg, seed: int):
    """A fresh ``Transformer`` of the real model's config ``cfg`` with the initialisation its authors
    state (``PackagedModel.initial_config``: for SmolLM2-135M every weight matrix N(0, 1/24)), from
    ``seed``: what "the same architecture at initialisation" means in the real-model rows."""
    from flax import nnx

    from nohair_jax.checkpoints import PACKAGED_MODELS
    from nohair_jax.model import Transformer

    return Transformer(PACKAGED_MODELS[REAL_MODEL].initial_config(cfg), rngs=nnx.Rngs(seed))


def with_prompt_logit_bias(model, gamma: float, prompt_len: int):
    """``model`` with the dilution-cancelling logit bias (``config.PromptLogitBias``) at strength
    ``gamma`` added at inference: the same parameters, a config that differs only there."""
    import dataclasses

    from flax import nnx

    from nohair_jax.config import PromptLogitBias

    cfg = dataclasses.replace(model.config, prompt_logit_bias=PromptLogitBias(prompt_len, gamma))
    graphdef, _ = model_skeleton(cfg)
    return nnx.merge(graphdef, nnx.state(model))


def first_layers(model, n: int | None):
    """The model cut to its first ``n`` blocks (final norm and output embedding kept); None: all
    (smoke profiles: a 30-layer compile takes half a minute)."""
    if n is None:
        return model
    import dataclasses

    from flax import nnx

    cfg = dataclasses.replace(model.config, n_layers=n)
    graphdef, _ = model_skeleton(cfg)
    state = nnx.state(model)
    state["blocks"] = nnx.State({i: state["blocks"][i] for i in range(n)})
    return nnx.merge(graphdef, state)


def heldout_text_tokens(tokenizer) -> np.ndarray:
    """The embedded corpus's held-out text, tokenized with a model's tokenizer: int [N]."""
    from nohair_jax.data import decode, stdlib_corpus
    from nohair_jax.tokenization import tokenize

    return tokenize(tokenizer, decode(stdlib_corpus().heldout))


def short_train_config(p: dict):
    """The ``TrainConfig`` of ``short_training``: ``p["steps"]`` steps of ``p["batch_size"]`` windows of
    ``p["context"]`` bytes, seed 0, a tenth of them warmup, one evaluation, checkpoint and log at the end."""
    from nohair_jax.train import TrainConfig

    steps = p["steps"]
    return TrainConfig(steps=steps, batch_size=p["batch_size"], context=p["context"], seed=0,
                       warmup_steps=max(1, steps // 10), eval_every=steps, checkpoint_every=steps, log_every=steps)


def short_training(cfg, corpus, p: dict, out: Path):
    """``train.train`` of ``cfg`` on ``corpus`` with ``short_train_config(p)`` into ``out / "train"``: the
    short training the contrasts compare."""
    from nohair_jax.train import train

    return train(cfg, short_train_config(p), corpus, out / "train", progress=False)


# The small byte-level model the training rows judge (trained_vs_untrained, logit_bias), how it is trained and
# measured: trained in doubling stages from ``first`` steps until its held-out loss levels off
# (``nohair_jax.plateau``) or ``max_steps`` are spent, at a learning rate constant after warm-up; offsets on
# ``n_pairs`` held-out text pairs (P ``prompt_len``, T ``length``) at step 0, at ``measure_at`` and at every
# stage's end. One table, so that both parts read the same unbiased run of a seed (``small_run``). Smoke and
# quick stop at their cap: their training rows are not measured at that scale; the full profile's sizes are
# measured in docs/benchmarks.md (training to a level held-out loss).
SMALL_TRAINING = {
    "smoke": dict(d_model=16, depth=2, context=64, batch_size=2, lr=5e-3, warmup_steps=4, eval_every=4, eval_windows=8,
                  first=16, max_steps=32, prompt_len=4, length=128, n_pairs=2, measure_at=(1,)),
    "quick": dict(d_model=64, depth=2, context=128, batch_size=8, lr=5e-3, warmup_steps=16, eval_every=8,
                  eval_windows=32, first=64, max_steps=128, prompt_len=16, length=1024, n_pairs=8, measure_at=(2, 3)),
    "full": dict(d_model=64, depth=2, context=128, batch_size=8, lr=5e-3, warmup_steps=100, eval_every=50,
                 eval_windows=200, first=800, max_steps=51200, prompt_len=16, length=1024, n_pairs=32,
                 measure_at=(10, 25, 50, 100)),
}
SMALL_RUNS = "small_training"  # the folder beside the parts' folders where the runs live
WAIT_S = 5.0  # how often a part waiting for a run another part trains looks again


def small_model_config(p: dict, gamma: float | None = None):
    """The small model of profile ``p`` (the keys of ``SMALL_TRAINING``): RoPE, the prompt logit bias at ``gamma``
    (None: none)."""
    from nohair_jax.config import PromptLogitBias, default_config

    bias = None if gamma is None else PromptLogitBias(p["prompt_len"], gamma)
    return default_config(p["depth"], d_model=p["d_model"], position="rope", prompt_logit_bias=bias)


def small_run_folder(out: Path, p: dict, seed: int, gamma: float | None = None) -> Path:
    """Where ``small_run`` keeps the run: ``out.parent / SMALL_RUNS / <bias>_seed<k>_<hash>``, the hash over every
    setting of ``SMALL_TRAINING``, the seed, the model's config and the corpus (its Python version among them)."""
    import hashlib
    import json

    from nohair_jax.data import stdlib_corpus

    settings = {k: p[k] for k in SMALL_TRAINING["full"]}
    key = json.dumps(dict(settings, seed=seed, model=small_model_config(p, gamma).to_dict(),
                          corpus=stdlib_corpus().to_dict()), sort_keys=True)
    bias = "no_bias" if gamma is None else f"bias{gamma:g}"
    return out.parent / SMALL_RUNS / f"{bias}_seed{seed}_{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def small_run(out: Path, p: dict, seed: int, gamma: float | None = None, *, progress: bool = True):
    """The small model of profile ``p`` (``small_model_config``) trained from ``seed`` until its held-out loss
    levels off (``staged.train_until_levelled``) and measured on the profile's held-out text pairs
    (``offsets_step<s>.npz`` at step 0, ``measure_at`` and every stage's end up to the stop). Returns (its
    folder, ``TrainResult`` at the stop, ``plateau.Verdict``).

    The run lives in ``small_run_folder``, named by everything that determines it, so the parts that train the
    same run (a seed's unbiased run, in trained_vs_untrained and logit_bias) train it once: a process that finds
    the run's folder in use waits for it, then reads it back (resumable, as every training run here)."""
    import time

    from nohair_jax.data import heldout_prompt_pairs, stdlib_corpus
    from nohair_jax.plateau import stage_ends
    from nohair_jax.staged import STAGE_KEYS, staged_config, train_until_levelled
    from nohair_jax.train import offsets_callback

    out.mkdir(parents=True, exist_ok=True)  # the summary names the run's folder relative to the part's
    folder = small_run_folder(out, p, seed, gamma)
    corpus = stdlib_corpus()
    pairs = heldout_prompt_pairs(corpus, 1, p["n_pairs"], p["prompt_len"], p["length"])
    steps = sorted({0, *p["measure_at"], *stage_ends(p["first"], p["max_steps"])})
    cfg = staged_config(**{k: p[k] for k in STAGE_KEYS}, seed=seed)
    while True:
        try:
            with folder_lock(folder):
                result, verdict = train_until_levelled(
                    small_model_config(p, gamma), cfg, corpus, folder, first=p["first"], max_steps=p["max_steps"],
                    progress=progress, callbacks=[(steps, offsets_callback(pairs, save_dir=folder))])
            return folder, result, verdict
        except FolderBusyError:  # another part trains this run now: read it back when it is done
            time.sleep(WAIT_S)


def write_summary(out: Path, summary: dict, *figures, name: str = "summary.json") -> dict:
    """What a part's ``run`` ends with: ``summary`` written to ``out / name`` (JSON), each of ``figures``
    (functions of the folder) drawn from that file, and the summary returned as read back (what the claims
    judge: JSON types, not the arrays or tuples it was built from)."""
    save_json(out / name, summary)
    for draw in figures:
        draw(out)
    return load_json(out / name)


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


def script_main(doc: str, name: str, profiles, run, table, *, claims=(), available=None) -> None:
    """An experiment's ``main``: its command line (``experiment_parser``, no seed), one line and exit
    where ``available()`` says why it cannot run here, then ``run``, ``table(summary)`` printed, and
    the part's ``claims`` judged on its summary."""
    from nohair_jax.claims import part_claims_text

    args = parse_experiment_args(experiment_parser(doc, name, profiles, seed=False))
    reason = available() if available else None
    if reason:
        raise SystemExit(reason)
    summary = run(args.profile, args.out)
    print(table(summary))
    print(part_claims_text(claims, summary))
