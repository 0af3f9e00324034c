"""Train a byte-level ``Transformer`` on a ``Corpus``, resumably and reproducibly.

One run is one folder::

    out_dir/config.json      model config, train config, corpus metadata (with a sha256)
    out_dir/history.json     {"history": [{step, loss, lr, tokens_per_s, eval_bits_per_byte, ...}, ...]}
    out_dir/checkpoints/<step>/{params, opt_state}   orbax checkpoints

Reproducibility: the model is initialised from ``TrainConfig.seed``; the batch of step ``s`` is a
pure function of ``(seed, s)`` (``batch_windows``); the optimiser's state (including its step
count, which drives the learning-rate schedule) is checkpointed with the parameters. So a run
interrupted and resumed from its last checkpoint replays exactly the same updates and ends
bit-identical to an uninterrupted one (on the same machine and software: XLA's rounding is
deterministic for a fixed compiled program, not across backends or versions).

Positions: prompt-pair offsets are measured at continuation lengths in the thousands, longer
than a CPU can train on, so models meant for offset measurements train with positions that
extrapolate past the training context: ``"rope"`` (relative; ``DEFAULT_MODEL``) or ``"none"``
(causal masking alone tells positions apart). On the stdlib corpus after 200 steps at context
256, RoPE reached 3.06 bits per byte at 256, 3.27 at 1024 and 3.44 at 2048; no positions reached
3.69, 3.82 and 3.88 (docs/training.md). Learned positions train too, but stop at ``max_len``.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import math
import shutil
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from flax import nnx
from tqdm.auto import tqdm

from nohair_jax.checks import check_int
from nohair_jax.data import Corpus
from nohair_jax.fit import FitRefused, alphas, fit_or_refuse
from nohair_jax.interrupts import deferred
from nohair_jax.measurement import measure
from nohair_jax.model import Transformer, TransformerConfig, model_skeleton
from nohair_jax.pairs import PromptPairs
from nohair_jax.results import load_json, save_json, save_npz

DEFAULT_MODEL = TransformerConfig(vocab_size=256, d_model=128, n_heads=4, n_layers=4, position="rope")

Callback = Callable[[Transformer, int], "dict | None"]


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """How to train: optimisation, data, evaluation, logging and checkpoint cadence.

    Steps count optimiser updates; step ``s`` of the history is the state after ``s`` updates.
    The learning rate rises linearly from 0 at step 0 to ``lr`` at ``warmup_steps``, then follows
    a cosine down to ``lr * final_lr_fraction`` at ``steps`` (``lr_schedule``). AdamW
    (``b1``, ``b2``, decoupled ``weight_decay`` on matrices only) after clipping the gradient's
    global norm to ``grad_clip``. A batch is ``batch_size`` windows of ``context + 1`` bytes.
    Evaluation: ``eval_batches * batch_size`` fixed windows of the held-out text, every
    ``eval_every`` steps. ``checkpoint_every`` must be a multiple of ``log_every`` (a checkpoint
    then never falls inside a logged loss average, so a resumed history matches too);
    ``keep_checkpoints`` is how many recent checkpoints to keep (None: all).
    """

    steps: int = 2000
    batch_size: int = 16
    context: int = 256
    lr: float = 2e-3
    warmup_steps: int = 100
    final_lr_fraction: float = 0.1
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    b1: float = 0.9
    b2: float = 0.95
    seed: int = 0
    eval_every: int = 200
    eval_batches: int = 8
    checkpoint_every: int = 500
    log_every: int = 10
    keep_checkpoints: int | None = 2

    def __post_init__(self):
        lowest = dict(steps=1, batch_size=1, context=1, warmup_steps=0, seed=0, eval_every=1, eval_batches=1,
                      checkpoint_every=1, log_every=1, keep_checkpoints=1)
        for name, low in lowest.items():
            value = getattr(self, name)
            if name == "keep_checkpoints" and value is None:
                continue
            object.__setattr__(self, name, check_int(f"TrainConfig.{name}", value, low))
        if self.warmup_steps >= self.steps:
            raise ValueError(f"warmup_steps={self.warmup_steps} must be smaller than steps={self.steps}")
        for name, value, ok, rule in (
            ("lr", self.lr, self.lr > 0, "> 0"),
            ("final_lr_fraction", self.final_lr_fraction, 0 <= self.final_lr_fraction <= 1, "in [0, 1]"),
            ("weight_decay", self.weight_decay, self.weight_decay >= 0, ">= 0"),
            ("grad_clip", self.grad_clip, self.grad_clip > 0, "> 0"),
            ("b1", self.b1, 0 <= self.b1 < 1, "in [0, 1)"),
            ("b2", self.b2, 0 <= self.b2 < 1, "in [0, 1)"),
        ):
            if not (math.isfinite(value) and ok):
                raise ValueError(f"TrainConfig.{name} must be finite and {rule}, got {value!r}")
        if self.checkpoint_every % self.log_every:
            raise ValueError(
                f"checkpoint_every={self.checkpoint_every} must be a multiple of log_every={self.log_every}"
            )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainConfig:
        return cls(**data)


@dataclasses.dataclass
class TrainResult:
    """model: the trained Transformer; history: the entries of history.json; out_dir: the run's folder."""

    model: Transformer
    history: list[dict]
    out_dir: Path


def lr_schedule(cfg: TrainConfig) -> optax.Schedule:
    """Learning rate of the update at step s (0-based):

    ``lr * s / warmup_steps`` for ``s < warmup_steps``, then
    ``end + (lr - end) * (1 + cos(pi * (s - warmup_steps) / (steps - warmup_steps))) / 2``
    with ``end = lr * final_lr_fraction``, constant ``end`` from ``s = steps`` on.
    """
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0,
        peak_value=cfg.lr,
        warmup_steps=cfg.warmup_steps,
        decay_steps=cfg.steps,
        end_value=cfg.lr * cfg.final_lr_fraction,
    )


def optimizer(cfg: TrainConfig) -> optax.GradientTransformation:
    """Global-norm clipping, then AdamW with ``lr_schedule``.

    Weight decay acts on matrices (kernels, embeddings) only: decaying norm gains and biases
    towards zero would pull against what they are for (a gain of 1, no offset). One object per update
    rule (the fields that set it; not the seed, the batch, the evaluation, nor the steps of a rate constant
    after warm-up), so the jitted step compiled for it is reused across seeds and across the stages of a run
    continued to more steps.
    """
    steps = cfg.warmup_steps + 1 if cfg.final_lr_fraction == 1 else cfg.steps  # past warm-up: constant lr
    return _optimizer(TrainConfig(steps=steps, lr=cfg.lr, warmup_steps=cfg.warmup_steps,
                                  final_lr_fraction=cfg.final_lr_fraction, weight_decay=cfg.weight_decay,
                                  grad_clip=cfg.grad_clip, b1=cfg.b1, b2=cfg.b2))


@functools.cache
def _optimizer(rule: TrainConfig) -> optax.GradientTransformation:
    return optax.chain(
        optax.clip_by_global_norm(rule.grad_clip),
        optax.adamw(
            lr_schedule(rule), b1=rule.b1, b2=rule.b2, weight_decay=rule.weight_decay,
            mask=lambda params: jax.tree.map(lambda p: p.ndim >= 2, params),
        ),
    )


def batch_windows(tokens: np.ndarray, seed: int, step: int, batch_size: int, context: int) -> np.ndarray:
    """The training batch of ``step``: int32 [batch_size, context + 1], random windows of ``tokens``.

    A pure function of (seed, step), so a resumed run sees the same data as an uninterrupted one.
    """
    rng = np.random.default_rng([seed, step])
    starts = rng.integers(0, tokens.size - context, batch_size)
    return tokens[starts[:, None] + np.arange(context + 1)]


def eval_windows(tokens: np.ndarray, context: int, n_windows: int) -> np.ndarray:
    """Fixed evaluation windows, int32 [n_windows, context + 1], starts evenly spaced over ``tokens``."""
    if tokens.size < context + 1:
        raise ValueError(f"the held-out text has {tokens.size} tokens, fewer than context + 1 = {context + 1}")
    starts = np.linspace(0, tokens.size - context - 1, n_windows).round().astype(np.int64)
    return tokens[starts[:, None] + np.arange(context + 1)]


def cross_entropy(model: Transformer, windows: jax.Array) -> jax.Array:
    """Next-byte cross-entropy (nats) of every prediction: windows int [B, C + 1] -> float32 [B, C]."""
    logits = model(windows[:, :-1]).logits.astype(jnp.float32)
    return optax.softmax_cross_entropy_with_integer_labels(logits, windows[:, 1:])


@functools.partial(jax.jit, static_argnums=0)
def _cross_entropy_sum(graphdef, params, windows):
    return cross_entropy(nnx.merge(graphdef, params), windows).sum()


def bits_per_byte(model: Transformer, windows: np.ndarray, *, batch_size: int = 16) -> float:
    """Mean next-byte cross-entropy over windows int [n, C + 1], in bits: ``nats / ln 2``.

    Every window predicts its last C tokens from the ones before. Batch sums are added in
    float64 on the host, so the result does not depend on ``batch_size`` beyond float32 rounding
    inside a batch (a model that predicts uniform bytes scores 8 up to that rounding).
    """
    graphdef, params = nnx.split(model)
    total = 0.0
    for start in range(0, len(windows), batch_size):
        total += float(_cross_entropy_sum(graphdef, params, jnp.asarray(windows[start : start + batch_size])))
    predictions = windows.shape[0] * (windows.shape[1] - 1)
    return total / predictions / math.log(2)


@functools.partial(jax.jit, static_argnums=(0, 1), donate_argnums=(2, 3))
def _train_step(graphdef, tx: optax.GradientTransformation, params, opt_state, windows):
    """One update: windows int [B, C + 1] -> (params, opt_state, loss in nats per byte).

    Parameters and optimiser state are donated: the update writes into their buffers.
    """
    loss_fn = lambda p: cross_entropy(nnx.merge(graphdef, p), windows).mean()
    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


def _callbacks_by_step(callbacks, steps: int) -> dict[int, list[Callback]]:
    """``{step: fn}`` or ``[(step or steps, fn), ...]`` -> ``{step: [fn, ...]}``, steps in [0, steps]."""
    pairs = callbacks.items() if isinstance(callbacks, Mapping) else callbacks
    by_step: dict[int, list[Callback]] = {}
    for when, fn in pairs:
        for s in [when] if isinstance(when, (int, np.integer)) else when:
            if not 0 <= s <= steps:
                raise ValueError(f"callback step {s} is outside the run's steps [0, {steps}]")
            by_step.setdefault(int(s), []).append(fn)
    return by_step


def _run_config(model_config: TransformerConfig, train_config: TrainConfig, corpus: Corpus) -> dict:
    return {"model": model_config.to_dict(), "train": train_config.to_dict(), "corpus": corpus.to_dict()}


def _check_same_run(saved: dict, current: dict, out_dir: Path) -> None:
    """A resumed run must be the run that wrote the checkpoints, or it would silently mix two. Model
    settings added since the run was written take their defaults (which keep earlier models as they were);
    how many checkpoints are kept changes no update, and may differ; nor does the number of steps where the
    learning rate stays constant after warm-up in both (``final_lr_fraction`` 1: no update depends on the
    total), so such a run continues to more steps (``staged.train_to``, training in stages)."""
    current = json.loads(json.dumps(current))  # tuples as the saved JSON holds them: lists
    saved = {part: saved.get(part) for part in current}
    constant = all(isinstance(c["train"], dict) and c["train"].get("final_lr_fraction") == 1 for c in (saved, current))
    ignored = ("keep_checkpoints", "steps") if constant else ("keep_checkpoints",)
    for config in (saved, current):
        if isinstance(config["train"], dict):
            config["train"] = {k: v for k, v in config["train"].items() if k not in ignored}
    if isinstance(saved["model"], dict):
        defaults = {f.name: f.default for f in dataclasses.fields(TransformerConfig)}
        saved["model"] = {**{k: v for k, v in defaults.items() if k not in saved["model"]}, **saved["model"]}
    if saved != current:
        differ = [
            f"{part}.{key}" for part in current for key in current[part]
            if (saved[part] or {}).get(key) != current[part][key]
        ]
        raise ValueError(
            f"{out_dir} holds a run with a different configuration (differs in {', '.join(differ)}); "
            "use another out_dir, or resume=False to start over there"
        )


def _checkpoint_manager(out_dir: Path, keep: int | None) -> ocp.CheckpointManager:
    # Synchronous saves: a checkpoint is complete on disk when save() returns, before the next
    # update donates (overwrites) the buffers it was written from.
    options = ocp.CheckpointManagerOptions(max_to_keep=keep, enable_async_checkpointing=False, create=True)
    return ocp.CheckpointManager((out_dir / "checkpoints").absolute(), options=options)


def _abstract(tree):
    return jax.tree.map(ocp.utils.to_shape_dtype_struct, tree)


def _check_corpus(model_config: TransformerConfig, cfg: TrainConfig, corpus: Corpus) -> None:
    """ValueError, before any file is written, where the corpus cannot feed this run."""
    for part in ("train", "heldout"):
        tokens = getattr(corpus, part)
        if tokens.size < cfg.context + 1:
            raise ValueError(f"corpus.{part} has {tokens.size} tokens, fewer than context + 1 = {cfg.context + 1}")
        if tokens.max() >= model_config.vocab_size:
            raise ValueError(f"corpus.{part} holds token {tokens.max()}, outside vocab_size={model_config.vocab_size}")
    if model_config.position == "learned" and cfg.context > model_config.max_len:
        raise ValueError(f"context={cfg.context} exceeds the learned position table (max_len={model_config.max_len})")


@dataclasses.dataclass
class _History:
    """A run's ``history.json`` and what is due at each step: held-out evaluation, the callbacks."""

    path: Path
    graphdef: nnx.GraphDef
    cfg: TrainConfig
    by_step: dict[int, list[Callback]]
    heldout_windows: np.ndarray
    entries: list[dict] = dataclasses.field(default_factory=list)

    def record(self, step: int, params, entry: dict) -> None:
        """Evaluate and run the callbacks as due at ``step``, add ``entry`` to the history, save it."""
        cfg = self.cfg
        if step == 0 or step % cfg.eval_every == 0 or step == cfg.steps:
            model = nnx.merge(self.graphdef, params)
            entry["eval_bits_per_byte"] = bits_per_byte(model, self.heldout_windows, batch_size=cfg.batch_size)
        for fn in self.by_step.get(step, []):
            # A copy: the next update donates the buffers of ``params``.
            out = fn(nnx.merge(self.graphdef, jax.tree.map(jnp.copy, params)), step) or {}
            clash = set(out) & (set(entry) | {"step"})
            if clash:
                raise ValueError(f"callback {fn!r} returned keys {sorted(clash)} that the step's entry already has")
            entry.update(out)
        if entry:
            self.entries.append({"step": step, **entry})
            save_json(self.path, {"history": self.entries})


def _restore(manager: ocp.CheckpointManager, step: int, params, opt_state):
    """(params, opt_state) of checkpoint ``step``, shaped like the given ones."""
    restored = manager.restore(step, args=ocp.args.Composite(
        params=ocp.args.StandardRestore(_abstract(params)), opt_state=ocp.args.StandardRestore(_abstract(opt_state))))
    return restored["params"], restored["opt_state"]


def _save(manager: ocp.CheckpointManager, step: int, params, opt_state) -> None:
    with deferred():  # Ctrl-C waits for the checkpoint: orbax cut mid-save logs a traceback
        manager.save(step, args=ocp.args.Composite(
            params=ocp.args.StandardSave(params), opt_state=ocp.args.StandardSave(opt_state)))


def train(
    model_config: TransformerConfig,
    train_config: TrainConfig,
    corpus: Corpus,
    out_dir,
    *,
    resume: bool = True,
    callbacks: Mapping[int, Callback] | Iterable[tuple[int | Iterable[int], Callback]] = (),
    progress: bool = True,
) -> TrainResult:
    """Train (or resume training) a Transformer on ``corpus.train``; evaluate on ``corpus.heldout``.

    Args:
      model_config: the architecture; its vocabulary must cover the corpus' tokens.
      train_config: the run (``TrainConfig``).
      corpus: a ``Corpus``; train and held-out parts must each hold ``context + 1`` tokens.
      out_dir: the run's folder (created). With ``resume`` and checkpoints there, training
        continues from the last one (the saved configuration must equal this one); without
        ``resume`` this run's checkpoints and history there are deleted and training starts over.
      callbacks: ``{step: fn}`` or ``[(step or steps, fn), ...]``; ``fn(model, step)`` runs after
        ``step`` updates (0: at initialisation) on a copy of the model and may return a dict of
        JSON-able values, merged into that step's history entry (e.g. ``offsets_callback``).
      progress: show a tqdm bar with the loss and throughput.

    History entries (``history.json``, rewritten atomically whenever an entry is added), each with
    ``step`` and whichever of these were recorded at it:
      loss: mean training loss (nats per byte) of the updates since the previous log entry;
      lr: learning rate of the last update; tokens_per_s: training throughput since the last
      pause for evaluation, callbacks or checkpoints (compilation excluded), every ``log_every``
      steps and at the end; eval_bits_per_byte: on the held-out windows, at step 0, every
      ``eval_every`` steps and at the end; and whatever callbacks return.
    """
    cfg, out_dir = train_config, Path(out_dir)
    _check_corpus(model_config, cfg, corpus)
    by_step = _callbacks_by_step(callbacks, cfg.steps)
    run_config = _run_config(model_config, cfg, corpus)
    if not resume:
        shutil.rmtree(out_dir / "checkpoints", ignore_errors=True)
        (out_dir / "history.json").unlink(missing_ok=True)
    elif (out_dir / "config.json").exists():
        _check_same_run(load_json(out_dir / "config.json"), run_config, out_dir)

    graphdef, params = nnx.split(Transformer(model_config, rngs=nnx.Rngs(cfg.seed)))
    tx = optimizer(cfg)
    # Committed to the device, as restored checkpoints are: jit compiles once for both.
    params, opt_state = jax.device_put((params, tx.init(params)), jax.devices()[0])
    schedule = lr_schedule(cfg)
    history = _History(out_dir / "history.json", graphdef, cfg, by_step,
                       eval_windows(corpus.heldout, cfg.context, cfg.eval_batches * cfg.batch_size))
    batch_windows(corpus.train, cfg.seed, 0, cfg.batch_size, cfg.context)  # sizes that cannot be held fail here
    save_json(out_dir / "config.json", run_config)  # only now: a run refused above leaves no file

    with _checkpoint_manager(out_dir, cfg.keep_checkpoints) as manager:
        start = manager.latest_step() or 0
        if start:
            params, opt_state = _restore(manager, start, params, opt_state)
            history.entries = [e for e in load_json(history.path)["history"] if e["step"] <= start]
        with tqdm(total=cfg.steps, initial=start, unit="step", disable=not progress, dynamic_ncols=True) as bar:
            if start == 0:
                history.record(0, params, {})
            losses: list[jax.Array] = []
            mark, mark_step = time.perf_counter(), start
            for i in range(start, cfg.steps):
                windows = batch_windows(corpus.train, cfg.seed, i, cfg.batch_size, cfg.context)
                params, opt_state, loss = _train_step(graphdef, tx, params, opt_state, windows)
                losses.append(loss)
                step = i + 1
                bar.update(1)
                if i == start:  # the first update of a call may include compilation: not throughput
                    loss.block_until_ready()
                    mark, mark_step = time.perf_counter(), step
                entry = {}
                if step % cfg.log_every == 0 or step == cfg.steps:
                    mean_loss = float(np.mean(jax.device_get(losses)))  # waits for the update to finish
                    tokens = (step - mark_step) * cfg.batch_size * cfg.context
                    rate = tokens / (time.perf_counter() - mark) if tokens else None  # None: nothing timed
                    entry = {"loss": mean_loss, "lr": float(schedule(i)), "tokens_per_s": rate}
                    losses = []
                    bar.set_postfix(loss=f"{mean_loss:.3f}", tok_s=f"{rate or 0:,.0f}")
                history.record(step, params, entry)  # adds evaluation and callback results to entry
                checkpoint = step % cfg.checkpoint_every == 0 or step == cfg.steps
                if checkpoint:
                    _save(manager, step, params, opt_state)
                if entry or checkpoint or step in by_step:  # the rate restarts after every pause
                    mark, mark_step = time.perf_counter(), step

    return TrainResult(model=nnx.merge(graphdef, params), history=history.entries, out_dir=out_dir)


def run_model_config(out_dir: str | Path) -> TransformerConfig:
    """The model config a training run folder's ``config.json`` holds; ValueError naming the run where this
    version cannot read it."""
    try:
        return TransformerConfig(**load_json(Path(out_dir) / "config.json")["model"])
    except TypeError as err:
        raise ValueError(f"training run {str(out_dir)!r}: its config.json holds no model config this version reads "
                         f"({err})") from None


def load_trained(out_dir, *, step: int | None = None) -> Transformer:
    """The model of the run folder ``out_dir``: rebuilt from ``config.json``, parameters from the last checkpoint
    (or from ``step``, if that checkpoint is still kept)."""
    out_dir = Path(out_dir)
    if not (out_dir / "config.json").exists():
        raise ValueError(f"{out_dir} holds no config.json: not a training run folder")
    model_config = run_model_config(out_dir)
    graphdef, abstract_params = model_skeleton(model_config)
    with _checkpoint_manager(out_dir, None) as manager:
        step = manager.latest_step() if step is None else step
        if step is None or step not in manager.all_steps():
            raise ValueError(f"{out_dir} holds no checkpoint {'at all' if step is None else f'at step {step}'}")
        restored = manager.restore(step, args=ocp.args.Composite(params=ocp.args.StandardRestore(abstract_params)))
    return nnx.merge(graphdef, restored["params"])


def offsets_callback(
    pairs: PromptPairs, *, fit_kwargs: dict | None = None, floor_pairs: int = 2, save_dir=None
) -> Callback:
    """A callback that measures prompt-pair offsets and fits alpha per layer, for ``train(callbacks=...)``.

    At each requested step it runs ``measurement.measure`` on ``pairs`` (the float32 noise floor
    on ``floor_pairs`` pairs, 0: none; every layer fitted with ``fit_kwargs``). It returns
    ``{"alpha": [L] floats (None where a layer's fit was refused), "offset_fits": [L] fit dicts}``,
    so alpha versus training step is in the history (``alpha_history`` reads it back). With
    ``save_dir`` the curves are kept too, as ``save_dir/offsets_step<step>.npz`` in the layout of
    ``Measurement.arrays``. ValueError where the continuations are too short for the fit's window (``unfitted``).
    """
    length = pairs.continuations.shape[1]
    why = unfitted(length, fit_kwargs)
    if why is not None:  # before any step: every alpha would be refused
        raise ValueError(f"continuations of {length} tokens leave no window to fit alpha on: {why}")

    def measure_offsets(model: Transformer, step: int) -> dict:
        m = measure(model, pairs, floor_pairs=floor_pairs, fit_kwargs=fit_kwargs)
        if save_dir is not None:
            save_npz(Path(save_dir) / f"offsets_step{step}.npz", **m.arrays())
        return {"alpha": alphas(m.fits), "offset_fits": [fit.to_dict() for fit in m.fits]}

    return measure_offsets


def unfitted(length: int, fit_kwargs: dict | None = None) -> str | None:
    """Why ``fit.fit_power_law`` with ``fit_kwargs`` fits no curve at t = 1..``length`` (its window [t_min,
    t_max] lies outside them or holds fewer than ``min_bins`` log bins), None where it fits one: an exact
    power law is fitted to find out, so the answer is the fit's own."""
    t = np.arange(1.0, length + 1)
    fit = fit_or_refuse(t, 1 / t, **{**(fit_kwargs or {}), "n_boot": 0})
    return fit.reason if isinstance(fit, FitRefused) else None


def shortest_fitted_length() -> int:
    """The fewest continuation tokens on which ``offsets_callback``'s default fit (``fit.fit_power_law``'s
    window t in [32, T], at least 4 log bins of 8 per decade) fits alpha: 76 (``unfitted``)."""
    return next(length for length in itertools.count(2) if unfitted(length) is None)


def alpha_history(history: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """From a history: steps int [n] where alpha was measured, alpha float [n, L] (nan where refused)."""
    entries = [e for e in history if "alpha" in e]
    steps = np.array([e["step"] for e in entries], dtype=np.int64)
    alpha = np.array([[np.nan if a is None else a for a in e["alpha"]] for e in entries], dtype=np.float64)
    return steps, alpha
