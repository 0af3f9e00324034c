"""Training a small model in doubling stages until its held-out loss levels off (``plateau.levelled_off``).

A staged run trains to ``first``, ``2 first``, ``4 first``, ... steps (``plateau.stage_ends``) on a
learning rate that is constant after warm-up, so that a run resumed to a longer stage is the same run as
one trained to that length at once (``train.train`` resumes from its last checkpoint; the batch of a step
depends on (seed, step) alone). ``train_until_levelled`` trains the stages ``plateau.next_steps`` names.

Requirements on the run (``check_stageable``): ``final_lr_fraction = 1`` (constant after warm-up: a
cosine's rate depends on the total steps, so a longer stage would change the rate of the steps already
taken), warm-up within the first stage's first half, evaluations every ``eval_every`` steps with
``eval_every`` dividing ``first / 2`` (the start of every doubling is evaluated), and per-window values
at both ends of the doubling (``train_to`` records them with ``window_bits_callback``). The learning rate
must also be constant over the judged doubling, which ``levelled_off`` checks on the history's ``lr``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterable
from pathlib import Path

import jax
import numpy as np
from flax import nnx
from tqdm.auto import tqdm

from nohair_jax.data import Corpus
from nohair_jax.model import TransformerConfig
from nohair_jax.plateau import WINDOW_KEY, Verdict, levelled_off, next_steps
from nohair_jax.results import load_json
from nohair_jax.train import Callback, TrainConfig, TrainResult, cross_entropy, eval_windows, train

STAGE_KEYS = ("first", "batch_size", "context", "lr", "warmup_steps", "eval_every", "eval_windows")  # staged_config's


def staged_config(*, first: int, batch_size: int, context: int, lr: float, warmup_steps: int, eval_every: int,
                  eval_windows: int, seed: int) -> TrainConfig:
    """The ``TrainConfig`` of a run trained in doubling stages from ``first`` steps: ``lr`` constant after
    ``warmup_steps`` of warm-up, batches of ``batch_size`` windows of ``context`` bytes, the model initialised
    and the batches drawn from ``seed``, ``eval_windows`` held-out windows (a multiple of ``batch_size``)
    evaluated every ``eval_every`` steps, the loss logged every 10 steps (every ``eval_every`` where fewer) and
    a checkpoint every ``first / 2`` steps (every stage's end among them). Runs that should be the same run
    (one seed of two experiments) get it from here, so they cannot differ."""
    log_every = min(10, eval_every)
    cfg = TrainConfig(steps=first, batch_size=batch_size, context=context, lr=lr, warmup_steps=warmup_steps,
                      final_lr_fraction=1.0, seed=seed, eval_every=eval_every, eval_batches=eval_windows // batch_size,
                      checkpoint_every=first // 2, log_every=log_every)
    check_stageable(cfg, first)
    return cfg


def check_stageable(cfg: TrainConfig, first: int) -> None:
    """ValueError naming what to change where ``cfg`` cannot be trained in doubling stages from ``first``."""
    problems = []
    if cfg.final_lr_fraction != 1:
        problems.append(f"final_lr_fraction={cfg.final_lr_fraction} (1: constant after warm-up, as no later stage "
                        "changes the rate of the steps already taken)")
    if first % 2 or cfg.warmup_steps > first // 2:
        problems.append(f"first={first} with warmup_steps={cfg.warmup_steps} (first even, warm-up within its first half)")
    elif (first // 2) % cfg.eval_every:
        problems.append(f"eval_every={cfg.eval_every} does not divide first / 2 = {first // 2} (every doubling's start "
                        "must be evaluated)")
    if first % cfg.checkpoint_every:
        problems.append(f"checkpoint_every={cfg.checkpoint_every} does not divide first={first}")
    if problems:
        raise ValueError("this run cannot be trained in doubling stages: " + "; ".join(problems))


@functools.partial(jax.jit, static_argnums=0)
def _window_nats(graphdef, params, windows):
    return cross_entropy(nnx.merge(graphdef, params), windows).mean(axis=1)


def window_bits(model, windows: np.ndarray, *, batch_size: int = 16) -> np.ndarray:
    """Held-out bits per byte of ``model`` on every one of ``windows`` (int [n, C + 1]), float64 [n], run
    ``batch_size`` windows at a time; their mean is ``train.bits_per_byte`` of the same windows."""
    graphdef, params = nnx.split(model)
    nats = [np.asarray(_window_nats(graphdef, params, windows[i: i + batch_size]), dtype=np.float64)
            for i in range(0, len(windows), batch_size)]
    return np.concatenate(nats) / math.log(2)


def window_bits_callback(corpus: Corpus, cfg: TrainConfig) -> Callback:
    """A ``train`` callback returning ``{WINDOW_KEY: [n] floats}`` on the held-out evaluation windows that
    ``train`` cuts from ``corpus`` for the run ``cfg`` (``train.eval_windows``), to run at evaluation steps:
    the per-window values ``levelled_off`` needs at both ends of a doubling."""
    windows = eval_windows(corpus.heldout, cfg.context, cfg.eval_batches * cfg.batch_size)
    return lambda model, step: {WINDOW_KEY: window_bits(model, windows, batch_size=cfg.batch_size).tolist()}


def train_to(
    model_config: TransformerConfig,
    train_config: TrainConfig,
    corpus: Corpus,
    out_dir,
    steps: int,
    *,
    callbacks: Iterable[tuple[int | Iterable[int], Callback]] = (),
    progress: bool = True,
) -> TrainResult:
    """``train`` the staged run in ``out_dir`` to ``steps`` (resuming from its last checkpoint, whatever ``steps``
    it was last trained to), with the per-window evaluation (``window_bits_callback``) at ``steps / 2`` and
    ``steps``, the ends of the doubling ``levelled_off`` judges there (``steps / 2`` is the previous stage's end,
    evaluated so when it was trained, or inside the first stage).

    ``model_config``, ``corpus``, ``progress``: as ``train``'s. ``train_config`` must pass ``check_stageable``
    for some first stage; its ``steps`` is replaced. ``callbacks`` as ``train``'s list form; steps beyond
    ``steps`` are left for a later call.
    """
    out_dir = Path(out_dir)
    if train_config.final_lr_fraction != 1:
        raise ValueError(f"final_lr_fraction={train_config.final_lr_fraction}: a staged run needs 1 (check_stageable)")
    cfg = dataclasses.replace(train_config, steps=steps)
    due = [([s for s in _steps(when) if s <= steps], fn) for when, fn in callbacks]
    return train(model_config, cfg, corpus, out_dir, progress=progress,
                 callbacks=[((steps // 2, steps), window_bits_callback(corpus, cfg)), *due])


def _steps(when: int | Iterable[int]) -> list[int]:
    return list(when) if isinstance(when, Iterable) else [when]


def _saved_history(out_dir: Path) -> list[dict]:
    path = out_dir / "history.json"
    return load_json(path)["history"] if path.exists() else []


def train_until_levelled(
    model_config: TransformerConfig,
    train_config: TrainConfig,
    corpus: Corpus,
    out_dir,
    *,
    first: int,
    max_steps: int,
    callbacks: Iterable[tuple[int | Iterable[int], Callback]] = (),
    progress: bool = True,
) -> tuple[TrainResult, Verdict]:
    """Train in doubling stages (``stage_ends(first, max_steps)``, each by ``train_to``) until ``levelled_off``,
    or until the budget ``max_steps`` is spent: the stages ``next_steps`` names, one after another.

    ``model_config``, ``corpus``: as ``train``'s. ``train_config`` must pass ``check_stageable(train_config,
    first)``. Resumable: what ``out_dir``'s history already holds is judged, not trained again, and an
    interrupted stage resumes from its last checkpoint. ``callbacks`` as ``train``'s list form. With
    ``progress``, a line per stage trained. Returns the model at
    the last stage and its verdict (not levelled, "budget spent" leading its reason, where the last stage the
    budget allows did not level off).
    """
    out_dir = Path(out_dir)
    check_stageable(train_config, first)
    callbacks = [(_steps(when), fn) for when, fn in callbacks]
    history = _saved_history(out_dir)
    while (steps := next_steps(history, first, max_steps)) is not None:
        history = train_to(model_config, train_config, corpus, out_dir, steps, callbacks=callbacks,
                           progress=progress).history
        if progress:
            tqdm.write(f"{out_dir}: {steps} steps, {levelled_off(history).reason}")
    verdict = levelled_off(history)
    if not verdict.levelled:
        verdict = dataclasses.replace(verdict, reason=f"budget spent ({max_steps} steps allowed): {verdict.reason}")
    # The model at the stop, from its checkpoint (at once: the stage was trained, now or before).
    result = train_to(model_config, train_config, corpus, out_dir, verdict.step, callbacks=callbacks, progress=False)
    if result.history[-1]["step"] != verdict.step:
        raise ValueError(f"{out_dir} holds training past the stop at {verdict.step} steps "
                         f"(to step {result.history[-1]['step']})")
    return result, verdict
