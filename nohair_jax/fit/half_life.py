"""The prompt half-life of next-token KL curves: how many tokens the prompt's effect on the next-token
distribution lasts (docs/definitions.md#fits).

KL curves are ``kl [n_pairs, K]`` in nats at positions ``t [K]`` (tokens); the mean over pairs is
averaged in log-spaced bins of ``t`` and read from its peak bin on; positions in the result are bin
centres (geometric mean of t), with percentile intervals over resampled pairs.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from nohair_jax.fit._checks import _check_last_axis, _check_t, _real
from nohair_jax.fit.binning import log_binned
from nohair_jax.fit.intervals import bootstrap_indices


@dataclasses.dataclass(frozen=True)
class HalfLife:
    """Result of ``kl_half_life``: how many tokens the prompt's effect on the next-token
    distribution lasts, two ways, each with a bootstrap interval over pairs.

    t: the half-life, the centre (geometric mean of t) of the first log bin after the peak bin
    whose mean KL is at most half the peak's; None if it never halves up to T. t_below: the first
    bin at or after the peak whose mean KL is at most ``threshold`` nats; None if never.
    ci, ci_below: (lo, hi) over resamples of the pairs, None for one pair (no interval exists) or
    ``n_boot = 0``; a resample that never gets there counts as T, so ``hi == T`` reads "at least T".
    peak_t, kl_peak: where the binned mean KL is largest, and its value (nats). last_bin_t: the
    centre of the last log bin (a position there may lie beyond T: the window ends in that bin).
    ``str()`` reads it in one line, rounded, saying where a position sits at the window's edge.
    """

    t: float | None
    ci: tuple[float, float] | None
    t_below: float | None
    ci_below: tuple[float, float] | None
    threshold: float
    peak_t: float
    kl_peak: float
    length: int
    n_pairs: int
    confidence: float = 0.95
    last_bin_t: float | None = None

    def to_dict(self) -> dict:
        plain = lambda ci: None if ci is None else list(ci)  # noqa: E731
        return dict(t=self.t, ci=plain(self.ci), t_below=self.t_below, ci_below=plain(self.ci_below),
                    threshold=self.threshold, peak_t=self.peak_t, kl_peak=self.kl_peak, length=self.length,
                    n_pairs=self.n_pairs, confidence=self.confidence, last_bin_t=self.last_bin_t)

    @classmethod
    def from_dict(cls, saved: dict) -> "HalfLife":
        """The ``HalfLife`` a ``to_dict()`` was made from (read back from JSON)."""
        return cls(**{k: tuple(v) if k.startswith("ci") and v is not None else v for k, v in saved.items()})

    def _where(self, t: float | None, ci: tuple[float, float] | None) -> str:
        text = f"not by T = {self.length}" if t is None else f"by t = {t:.0f}"
        if ci is not None:
            text += f" [{ci[0]:.0f}, " + (f">= {self.length}]" if ci[1] >= self.length else f"{ci[1]:.0f}]")
        edge = self.last_bin_t is not None and any(v is not None and v >= self.last_bin_t for v in (t, ci and ci[1]))
        return text + (" (in the window's last bin: measure longer to place it)" if edge else "")

    def __str__(self) -> str:
        intervals = ("no interval with one pair" if self.ci is None
                     else f"{self.confidence:.0%} intervals over {self.n_pairs} pairs")
        return (f"next-token KL: peak {self.kl_peak:.3g} nats at t = {self.peak_t:.0f}; half of it "
                f"{self._where(self.t, self.ci)}; below {self.threshold:g} nats "
                f"{self._where(self.t_below, self.ci_below)} ({intervals})")


def kl_half_life(kl, *, t=None, threshold=0.01, bins_per_decade=8, n_boot=1000, confidence=0.95, seed=0) -> HalfLife:
    """The prompt half-life of next-token KL curves ``kl [n_pairs, K]`` (nats) at positions ``t``
    int [K], increasing, from 1 or later (None: every t = 1..K; ``Offsets.kl_t`` for a sparse measurement).

    The mean over pairs is averaged in log-spaced bins of t (edges from the first t, ``bins_per_decade``
    per decade). From the bin where it peaks (the first tokens after a prompt may be template
    tokens that both prompts predict alike), the half-life is the first bin whose mean is at most
    half the peak's, and ``t_below`` the first whose mean is at most ``threshold`` nats. The
    intervals (level ``confidence``) are percentiles of ``n_boot`` resamples of the pairs
    (``bootstrap_indices``, ``numpy.random.default_rng(seed)``). Returns a ``HalfLife``.
    """
    kl = _real("kl", kl)
    if kl.ndim != 2 or kl.shape[0] < 1 or kl.shape[1] < 2:
        raise ValueError(f"kl must have shape [n_pairs, T] with n_pairs >= 1 and T >= 2, got {kl.shape}")
    t = np.arange(1, kl.shape[1] + 1) if t is None else _check_t(t)
    _check_last_axis(t, kl, "kl")
    if not np.isfinite(kl).all():
        raise ValueError("kl holds non-finite values")
    if not threshold > 0:
        raise ValueError(f"threshold must be > 0 nats, got {threshold!r}")
    length = int(t[-1])
    t_bin, kl_bin = log_binned(t, kl, t_min=int(t[0]), t_max=length, bins_per_decade=bins_per_decade)

    def crossings(curve: np.ndarray) -> tuple[float | None, float | None]:
        peak = int(np.argmax(curve))
        after = curve[peak:]
        first = lambda mask: None if not mask.any() else float(t_bin[peak + np.argmax(mask)])  # noqa: E731
        return first(after <= 0.5 * after[0]), first(after <= threshold)

    mean = kl_bin.mean(0)
    half, below = crossings(mean)
    ci = ci_below = None
    if kl.shape[0] > 1 and n_boot > 0:
        idx = bootstrap_indices(kl.shape[0], n_boot, seed)
        found = np.array([[length if v is None else v for v in crossings(kl_bin[i].mean(0))] for i in idx])
        q = [(1 - confidence) / 2, (1 + confidence) / 2]
        ci, ci_below = (tuple(float(v) for v in np.quantile(found[:, k], q)) for k in (0, 1))
    peak = int(np.argmax(mean))
    return HalfLife(t=half, ci=ci, t_below=below, ci_below=ci_below, threshold=float(threshold),
                    peak_t=float(t_bin[peak]), kl_peak=float(mean[peak]), length=length, n_pairs=kl.shape[0],
                    confidence=float(confidence), last_bin_t=float(t_bin[-1]))
