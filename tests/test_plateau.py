"""The stopping rule (``nohair_jax.plateau``) on synthetic held-out histories: no training.

A history is what ``train.train`` writes: ``eval_bits_per_byte`` every ``every`` steps with the
bits of each evaluation window (``WINDOW_KEY``), and the learning rate every 10 steps. The window
values are a curve ``bits(step)`` plus a fixed offset per window (some text is harder), training
noise common to every window at a step, and noise of each window at a step.
"""

import math

import numpy as np
import pytest

from nohair_jax.plateau import MAX_DROP, WINDOW_KEY, levelled_off, next_steps, stage_ends
from nohair_jax.staged import check_stageable, staged_config, window_bits
from nohair_jax.train import TrainConfig

N_WINDOWS = 32


def history(bits, last: int, *, every: int = 50, noise: float = 0.0, window_noise: float = 0.0, seed: int = 0,
            lr=lambda step: 2e-3) -> list[dict]:
    """Evaluations at 0, every, ..., last of the curve ``bits(step)`` (bits per byte) with training noise of sd
    ``noise`` and per-window noise of sd ``window_noise``; ``lr(step)`` logged every 10 steps."""
    rng = np.random.default_rng(seed)
    hardness = rng.normal(0, 0.5, N_WINDOWS)  # fixed per window, cancels in every window's slope
    entries = []
    for step in range(0, last + 1, 10):
        entry = dict(step=step, lr=lr(step)) if step else dict(step=0)
        if step % every == 0:
            windows = bits(max(step, 1)) + hardness + rng.normal(0, noise) + rng.normal(0, window_noise, N_WINDOWS)
            entry.update(eval_bits_per_byte=float(windows.mean()), **{WINDOW_KEY: windows.tolist()})
        entries.append(entry)
    return entries


def falling(per_doubling: float):
    """A curve that falls by ``per_doubling`` bits per byte every doubling of the steps."""
    return lambda step: 3.0 - per_doubling * math.log2(step)


def flat(step):
    return 2.5


def levelled_share(bits, last: int, draws: int = 200, **noise) -> float:
    return np.mean([levelled_off(history(bits, last, seed=seed, **noise)).levelled for seed in range(draws)])


def test_a_curve_still_falling_at_the_stated_rate_is_not_levelled():
    verdict = levelled_off(history(falling(1.5 * MAX_DROP), 1600))
    assert not verdict.levelled and verdict.reason.startswith("still falling")
    assert verdict.drop == pytest.approx(1.5 * MAX_DROP)
    assert (verdict.start, verdict.step, verdict.n_evals) == (800, 1600, 17)


def test_noise_does_not_stop_a_curve_falling_twice_the_threshold():
    # The upper bound's promise: a curve falling by 2 * MAX_DROP per doubling is called levelled in at most
    # 5 % of noisy draws, whatever the noise. The estimate alone (drop < MAX_DROP) stopped 24 % of these.
    for noise in (0.01, 0.03):
        assert levelled_share(falling(2 * MAX_DROP), 1600, noise=noise, window_noise=0.05) <= 0.05 + 0.03


def test_a_flat_curve_is_levelled():
    entries = history(flat, 1600, noise=0.002, window_noise=0.01)
    verdict = levelled_off(entries)
    assert verdict.levelled and verdict.reason.startswith("levelled off")
    assert abs(verdict.drop) < 0.01 and verdict.upper < 2 * MAX_DROP
    # What a staged run records (``staged.train_to``): per-window values at the doubling's two ends only.
    ends_only = [{k: v for k, v in e.items() if k != WINDOW_KEY or e["step"] in (800, 1600)} for e in entries]
    assert levelled_off(ends_only) == verdict


def test_a_noisy_flat_curve_is_levelled_not_refused_for_noise():
    # Training noise of 0.015 bits per byte per evaluation (what the small models show at a constant rate) on
    # 33 evaluations: t * SE near MAX_DROP. At least 95 % of the draws stop; a rule asking the upper bound
    # itself to lie below MAX_DROP stopped 45 % of them.
    assert levelled_share(flat, 3200, noise=0.015, window_noise=0.03) >= 0.95


def test_too_noisy_to_tell_says_so():
    verdicts = [levelled_off(history(flat, 800, noise=0.2, seed=seed)) for seed in range(50)]
    refused = [v for v in verdicts if not v.levelled and v.drop < MAX_DROP]
    assert refused and all(v.reason.startswith("too noisy to tell") for v in refused)
    assert sum(v.levelled for v in verdicts) < 25  # noise this large mostly cannot tell 0.02 from 0


def test_autocorrelated_training_noise_widens_the_interval():
    # A slow wander (a random walk) around a flat trend: evaluations next to each other are alike, so the
    # least-squares standard error, which takes them as independent, is widened for their autocorrelation.
    walk = np.cumsum(np.random.default_rng(0).normal(0, 0.01, 65))
    entries = history(lambda step: 2.5 + walk[step // 50 - 32], 3200)
    verdict = levelled_off(entries)
    x = np.log2(np.arange(1600, 3201, 50))
    y = np.array([e["eval_bits_per_byte"] for e in entries if e["step"] >= 1600 and "eval_bits_per_byte" in e])
    residuals = y - np.polyval(np.polyfit(x, y, 1), x)
    independent = math.sqrt(residuals @ residuals / (len(x) - 2) / ((x - x.mean()) @ (x - x.mean())))
    assert verdict.trend_se > 2 * independent
    assert verdict.dof < len(x) - 2


def test_a_rising_loss_is_levelled():
    verdict = levelled_off(history(falling(-0.05), 1600))  # overfitting: the held-out loss rises
    assert verdict.levelled and verdict.drop < 0 and "the loss rose" in verdict.reason


def test_a_plateau_then_a_drop_stops_at_the_plateau_and_not_once_the_drop_is_inside_the_doubling():
    def plateau_then_drop(step):  # flat from 400 to 1600, then 0.3 bits lower by 3200
        return 2.8 if step <= 1600 else 2.8 - 0.3 * min(1.0, (step - 1600) / 1600)
    # Stated behaviour: the rule judges the last doubling only, and [800, 1600] was flat.
    assert levelled_off(history(plateau_then_drop, 1600, noise=0.005)).levelled
    later = levelled_off(history(plateau_then_drop, 3200, noise=0.005))
    assert not later.levelled and later.drop > 0.2


def test_too_few_evaluations_no_window_values_or_a_changing_rate_are_not_judged():
    few = levelled_off(history(flat, 1600, every=400))
    assert not few.levelled and "evaluate more often" in few.reason
    bare = [{k: v for k, v in e.items() if k != WINDOW_KEY} for e in history(flat, 1600)]
    assert not levelled_off(bare).levelled and WINDOW_KEY in levelled_off(bare).reason
    cosine = levelled_off(history(flat, 1600, lr=lambda step: 2e-3 * (1 + math.cos(math.pi * step / 1600)) / 2))
    assert not cosine.levelled and "learning rate changed" in cosine.reason
    assert not levelled_off([dict(step=0, eval_bits_per_byte=8.0)]).levelled


def test_stages_double_up_to_the_budget():
    assert stage_ends(800, 8000) == [800, 1600, 3200, 6400]
    with pytest.raises(ValueError):
        stage_ends(800, 400)


def test_next_steps_follows_the_stages_and_stops_where_levelled_or_out_of_budget():
    still = history(falling(0.1), 1600)
    assert next_steps([], 800, 6400) == 800
    assert next_steps([e for e in still if e["step"] <= 500], 800, 6400) == 800  # the first stage, interrupted
    assert next_steps([e for e in still if e["step"] <= 800], 800, 6400) == 1600
    assert next_steps(still, 800, 6400) == 3200
    assert next_steps([e for e in still if e["step"] <= 1200], 800, 6400) == 1600  # interrupted inside a stage
    assert next_steps(history(flat, 1600), 800, 6400) is None  # levelled off
    assert next_steps(still, 800, 1600) is None  # the budget is spent


def test_check_stageable_names_what_to_change():
    good = staged_config(first=800, batch_size=8, context=128, lr=2e-3, warmup_steps=100, eval_every=50,
                         eval_windows=200, seed=0)
    assert (good.final_lr_fraction, good.checkpoint_every, good.eval_batches) == (1.0, 400, 25)
    for change, words in ((dict(final_lr_fraction=0.1), "final_lr_fraction"), (dict(eval_every=300), "eval_every"),
                          (dict(warmup_steps=500), "warmup_steps"), (dict(checkpoint_every=300), "checkpoint_every")):
        with pytest.raises(ValueError, match=words):
            check_stageable(TrainConfig(**{**good.to_dict(), **change}), 800)


def test_window_bits_average_to_the_held_out_bits_per_byte():
    from flax import nnx

    from nohair_jax.model import Transformer, TransformerConfig
    from nohair_jax.train import bits_per_byte

    model = Transformer(TransformerConfig(d_model=16, n_heads=2, n_layers=1, position="rope"), rngs=nnx.Rngs(0))
    windows = np.random.default_rng(0).integers(0, 256, (6, 17)).astype(np.int32)
    per_window = window_bits(model, windows, batch_size=4)
    assert per_window.shape == (6,)
    assert per_window.mean() == pytest.approx(bits_per_byte(model, windows, batch_size=4), rel=1e-6)
