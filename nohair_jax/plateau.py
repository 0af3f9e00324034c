"""When a small model's held-out loss has levelled off: a stopping rule stated before training.

Training runs in doubling stages, to ``first``, ``2 first``, ``4 first``, ... steps (``stage_ends``), on
a learning rate that is constant after warm-up (``nohair_jax.staged`` trains them). After each stage
``levelled_off`` judges the history; the next stage, if any, is ``next_steps``. This module is the rule
alone, plain numpy on a history: the claims read its constants without importing JAX.

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
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from nohair_jax.fit.intervals import t_quantile

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
    upper = drop + float(t_quantile(confidence, dof)) * se
    levelled = counts_as_levelled(drop, upper, max_drop)
    numbers = (f"drop per doubling {drop:+.4f} bits per byte over [{start:g}, {step}] (standard error {se:.4f}, "
               f"one-sided {confidence * 100:g} % upper bound {upper:+.4f}, {len(inside)} evaluations)")
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



def counts_as_levelled(drop: float | None, upper: float | None, max_drop: float = MAX_DROP) -> bool:
    """The rule's decision from its two numbers (a ``Verdict``'s ``drop`` and ``upper``, None where it fitted
    no slope): the drop per doubling below ``max_drop`` and its upper bound below twice that."""
    return drop is not None and upper is not None and drop < max_drop and upper < 2 * max_drop


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
