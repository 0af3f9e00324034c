"""When a small model's held-out loss has levelled off: a stopping rule stated before training.

Training runs in doubling stages, to ``first``, ``2 first``, ``4 first``, ... steps (``stage_ends``), on
a learning rate that is constant after warm-up, so that a run resumed to a longer stage is the same run
as one trained to that length at once (``train.train`` resumes from its last checkpoint; the batch of a
step depends on (seed, step) alone). After each stage ``levelled_off`` judges the history; the next
stage, if any, is ``next_steps``; ``train_until_levelled`` does both.

The rule (``levelled_off``), at the last evaluated step S, on the held-out evaluations at steps in
[S/2, S], the last doubling of the steps:

1. **The drop per doubling**, D (bits per byte): minus the slope of a least-squares straight line
   through the held-out bits per byte against log2(step). A loss that flattens smoothly (a power law in
   the steps, an exponential approach) is close to a straight line in log(step) over one doubling,
   and for a curve convex in log(step) the next doubling lowers the loss by less than the last one did:
   D bounds what training twice as long would still gain. Every evaluation of the doubling enters the
   slope, so no single noisy evaluation decides.
2. **Its standard error**, from the two noises of a held-out curve, added in quadrature:
   the *training noise*, the scatter of the evaluations around the trend (the model at one step is a
   noisy point of a stochastic trajectory): the line's standard error from its residuals, widened by
   ``sqrt((1 + rho) / (1 - rho))`` for their lag-1 autocorrelation ``rho`` (clipped at 0), whose
   degrees of freedom shrink to ``n (1 - rho) / (1 + rho) - 2``; and the *held-out text's noise*: the
   drop from S/2 to S window by window (``eval_window_bits``, recorded at those two steps) spreads over
   the evaluation windows, and its ``sd / sqrt(n_windows)`` is how much another text of the same kind
   could differ (paired: how hard a window is cancels; two evaluations rather than the slope's many, so
   it errs wide). The interval uses the smaller of the two degrees of freedom.
3. **Levelled off** when D < ``MAX_DROP`` = 0.02 bits per byte and its one-sided 95 % upper bound
   ``D + t * SE`` lies below ``2 * MAX_DROP`` = 0.04. A loss that rose over the doubling (overfitting)
   counts as levelled off.

What the numbers buy. A curve still falling by 0.04 bits per byte per doubling or more is called
levelled at most 5 % of the time whatever the noise (the upper bound): the rule does not stop on noise.
A flat curve is called levelled at least 95 % of the time while ``t * SE < MAX_DROP`` (the first
condition then implies the second, and 0.02 lies more than ``t`` standard errors above a true 0): the rule does not
refuse for noise unless the evaluation cannot tell 0.02 from 0, and then its verdict says "too noisy to
tell" and the next doubling brings twice the evaluations. Why 0.02 bits per byte: it is under 1 % of the
2 to 3 bits per byte these models reach; the earlier rule ("the last fifth of the steps lowered the loss
by under 2 % of its whole drop", from about 8 bits per byte: up to 0.1 bits over a third of a doubling)
let some 0.3 bits per doubling through, fifteen times more; and a smaller threshold would take several
times the evaluations: a 2-layer, width-64 model at a constant rate of 2e-3 scattered by 0.013 to 0.016
bits per byte around its trend from one evaluation to the next (measured while sizing this rule), which
puts the standard error of D at 0.007 to 0.01 on 30 to 60 evaluations. Whether 0.02 is strict enough for the
alphas the claims judge is measured, not assumed: ``benchmarks/plateau.py`` trains one configuration to
the stop and twice as long.

The rule judges the last doubling only: a loss that stayed flat over a whole doubling and drops again
later (a new ability learnt after a long plateau) is called levelled off at the plateau. No stopping rule
sees the future; the benchmark's second, doubled run is what would show such a drop.

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
from nohair_jax.results import load_json
from nohair_jax.train import Callback, TrainConfig, TrainResult, cross_entropy, eval_windows, train

MAX_DROP = 0.02  # bits per byte per doubling of the steps: the largest estimated drop that counts as levelled
CONFIDENCE = 0.95  # one-sided: drops of 2 * MAX_DROP or more are ruled out at this level
MIN_EVALS = 8  # fewest held-out evaluations in the last doubling: a slope, its scatter and their autocorrelation
WINDOW_KEY = "eval_window_bits"  # a history entry's held-out bits per byte of each evaluation window (at S/2 and S)


@dataclasses.dataclass(frozen=True)
class Verdict:
    """``levelled_off``'s answer at ``step`` (S), over the evaluations at steps in [``start``, S].

    drop: D, bits per byte lost per doubling of the steps (negative: the loss rose), None where no slope
    was fitted; upper: its one-sided ``CONFIDENCE`` upper bound; standard_error: of D, from
    ``trend_se`` (training noise) and ``window_se`` (held-out text) in quadrature; dof: the t
    quantile's degrees of freedom; n_evals: evaluations in the doubling; bits: held-out bits per byte at S.
    """

    levelled: bool
    reason: str
    step: int
    start: int | None = None
    n_evals: int = 0
    drop: float | None = None
    upper: float | None = None
    standard_error: float | None = None
    trend_se: float | None = None
    window_se: float | None = None
    dof: float | None = None
    bits: float | None = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _evaluations(history: list[dict]) -> list[dict]:
    return [e for e in history if "eval_bits_per_byte" in e]


def levelled_off(history: list[dict], *, max_drop: float = MAX_DROP, confidence: float = CONFIDENCE,
                 min_evals: int = MIN_EVALS) -> Verdict:
    """Whether a training history's held-out loss has levelled off at its last evaluation (the module's rule).

    ``history``: ``train.train``'s entries; those with ``eval_bits_per_byte`` are read, ``WINDOW_KEY`` (the
    bits per byte of every evaluation window, in the same order at both steps) at S/2 and S, and ``lr`` where
    logged. ``max_drop`` (bits per byte per doubling), ``confidence`` (one-sided) and ``min_evals``: the rule's
    numbers, the module's constants unless a test varies them. Returns a ``Verdict``: not levelled, with the
    reason, where the doubling holds fewer than ``min_evals`` evaluations, lacks the per-window values at its
    ends, or saw the learning rate change.
    """
    evals = _evaluations(history)
    if not evals or evals[-1]["step"] == 0:
        return Verdict(False, "no held-out evaluation after step 0", evals[-1]["step"] if evals else 0)
    step = evals[-1]["step"]
    start = step / 2
    inside = [e for e in evals if e["step"] >= start]
    base = dict(step=step, start=math.ceil(start), n_evals=len(inside), bits=evals[-1]["eval_bits_per_byte"])
    if len(inside) < min_evals:
        return Verdict(False, f"{len(inside)} held-out evaluations in the last doubling [{start:g}, {step}], "
                       f"{min_evals} needed: evaluate more often", **base)
    ends = [e for e in inside if e["step"] in (start, step) and WINDOW_KEY in e]
    if len(ends) != 2:
        return Verdict(False, f"the history holds no per-window held-out values ({WINDOW_KEY}) at both {start:g} and "
                       f"{step}", **base)
    rates = [e["lr"] for e in history if "lr" in e and start < e["step"] <= step]
    if rates and max(rates) > min(rates) * (1 + 1e-6):
        return Verdict(False, f"the learning rate changed in the last doubling ({min(rates):.3g} to {max(rates):.3g}): "
                       "a plateau needs a rate constant after warm-up", **base)
    x = np.log2([e["step"] for e in inside])
    drop, trend_se, trend_dof = _trend(x, np.array([e["eval_bits_per_byte"] for e in inside]))
    window_se, window_dof = _window_spread(*(np.array(e[WINDOW_KEY], dtype=np.float64) for e in ends))
    se = math.hypot(trend_se, window_se)
    dof = min(trend_dof, window_dof)
    upper = drop + _t_quantile(confidence, dof) * se
    levelled = drop < max_drop and upper < 2 * max_drop
    numbers = (f"drop per doubling {drop:+.4f} bits per byte over [{start:g}, {step}] (standard error {se:.4f}, "
               f"one-sided {confidence:.0%} upper bound {upper:+.4f}, {len(inside)} evaluations)")
    if levelled:
        why = "the loss rose" if drop < 0 else f"below {max_drop:g}, upper bound below {2 * max_drop:g}"
        reason = f"levelled off: {numbers}; {why}"
    elif drop >= max_drop:
        reason = f"still falling: {numbers}; at or above {max_drop:g}"
    else:
        reason = (f"too noisy to tell: {numbers}; the estimate is below {max_drop:g} but the upper bound is not "
                  f"below {2 * max_drop:g}")
    return Verdict(levelled, reason, drop=drop, upper=upper, standard_error=se, trend_se=trend_se,
                   window_se=window_se, dof=dof, **base)


def _trend(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """Least squares y = a + b x over the n points: (-b, its standard error widened for the residuals'
    lag-1 autocorrelation, the degrees of freedom left: ``n (1 - rho) / (1 + rho) - 2``, at least 1)."""
    slope, intercept = np.polyfit(x, y, 1)
    residuals = y - (intercept + slope * x)
    n = len(x)
    se = math.sqrt(residuals @ residuals / (n - 2) / ((x - x.mean()) @ (x - x.mean())))
    rho = _lag1_autocorrelation(residuals)
    widen = (1 + rho) / (1 - rho)
    return float(-slope), se * math.sqrt(widen), max(n / widen - 2, 1.0)


def _lag1_autocorrelation(residuals: np.ndarray) -> float:
    """Lag-1 autocorrelation of ``residuals`` in [0, 0.99]: negative values would narrow the interval, and
    the clip at 0.99 keeps the widening finite (a factor of 14)."""
    centred = residuals - residuals.mean()
    denominator = centred @ centred
    if denominator == 0:
        return 0.0
    return float(np.clip(centred[:-1] @ centred[1:] / denominator, 0.0, 0.99))


def _window_spread(first: np.ndarray, last: np.ndarray) -> tuple[float, float]:
    """The standard error over windows of the drop ``first - last`` (bits per byte of each window, [n_windows]
    each, the same windows), and its degrees of freedom."""
    drops = first - last
    if drops.size < 2 or first.shape != last.shape:
        raise ValueError(f"{WINDOW_KEY} needs the same two or more windows at both steps, got {first.shape} and {last.shape}")
    return float(drops.std(ddof=1) / math.sqrt(drops.size)), float(drops.size - 1)


def _t_quantile(confidence: float, dof: float) -> float:
    from scipy.stats import t as student_t

    return float(student_t.ppf(confidence, dof))


def stage_ends(first: int, max_steps: int) -> list[int]:
    """The steps at which stages end: ``first * 2**k`` up to ``max_steps`` (the budget)."""
    if first < 2 or max_steps < first:
        raise ValueError(f"need 2 <= first <= max_steps, got first={first}, max_steps={max_steps}")
    ends = [first]
    while ends[-1] * 2 <= max_steps:
        ends.append(ends[-1] * 2)
    return ends


def next_steps(history: list[dict], first: int, max_steps: int) -> int | None:
    """The step count to train to next, from a run's ``history`` and its stages (``stage_ends(first,
    max_steps)``): the first stage end not yet evaluated, or, where the last evaluation ends a stage, the next
    stage unless ``levelled_off`` says the loss levelled off there; None: stop (levelled off, or the budget
    ``max_steps`` is spent: ``levelled_off`` says which)."""
    evals = _evaluations(history)
    last = evals[-1]["step"] if evals else 0
    ends = stage_ends(first, max_steps)
    pending = [end for end in ends if end > last]
    if last not in ends:
        return pending[0] if pending else None
    if levelled_off(history).levelled or not pending:
        return None
    return pending[0]


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
