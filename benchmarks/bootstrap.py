"""The bootstrap's resampled curves: gathered pairs against counts times curves, side by side in one run.

``fit.intervals._resampled_curves`` forms each resample's mean (or geometric mean) curve as the pairs'
counts in the resample times their curves, one matrix product; the way before it gathered every resample's
pairs, ``[n_boot, n_pairs, T]``, and averaged them. Both are timed here alternately on the same data
(``fit_power_law`` with its 1000 resamples, the mean over pairs), the median of 5 rounds of 20 fits each:

    python benchmarks/bootstrap.py
"""

from __future__ import annotations

import time

import numpy as np

import nohair_jax.fit.powerlaw as powerlaw
from nohair_jax.fit import fit_power_law, intervals
from nohair_jax.fit.binning import summary_curve

SIZES = ((8, 256), (16, 512), (16, 1024))  # (pairs, T): the quick profile's sizes and the full one's T


def gathered(d, resamples, summary):
    """The previous way: each block of resamples' pairs gathered, then summarised."""
    chunk = max(1, intervals._BOOT_CHUNK_ELEMENTS // d.size)
    for start in range(0, max(len(resamples), 1), chunk):
        yield summary_curve(d[resamples[start:start + chunk]], summary)


def main() -> None:
    rng = np.random.default_rng(0)
    ways = {"gathered": gathered, "counts": intervals._resampled_curves}
    print("pairs      T  gathered ms  counts ms  ratio")
    for n_pairs, length in SIZES:
        t = np.arange(1, length + 1)
        d = np.exp(-0.6 * np.log(t) + rng.normal(0, 0.2, (n_pairs, length)))
        times = {name: [] for name in ways}
        for _ in range(5):
            for name, way in ways.items():
                powerlaw._resampled_curves = way
                start = time.perf_counter()
                for seed in range(20):
                    fit_power_law(t, d, t_min=16, seed=seed)
                times[name].append((time.perf_counter() - start) / 20 * 1e3)
        old, new = (float(np.median(times[name])) for name in ways)
        print(f"{n_pairs:5d} {length:6d} {old:12.1f} {new:10.1f} {old / new:5.2f}x")
    powerlaw._resampled_curves = intervals._resampled_curves


if __name__ == "__main__":
    main()
