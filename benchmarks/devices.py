"""One device against four: the same sweep in two fresh processes, alternated and repeated.

Each run is a subprocess (the device count is fixed when JAX starts): one with the machine's
single CPU device, one with ``XLA_FLAGS=--xla_force_host_platform_device_count=4``, which splits
the CPU into four virtual devices that ``nohair_jax.sweep`` shards the (seed, pair) items over.
Runs alternate (1, 4, 1, 4, ...) so that drift on a shared machine hits both alike. Each run
times
  - the whole sweep in a fresh folder (model init, compilation, sharded offsets, float64 noise
    floor on one device, fits, files, figures), and
  - the sharded offsets alone, warm (compiled), best of two,
and reports a digest of the offsets: they must be the same on one device and on four.

Four virtual devices cannot beat the cores they run on: on a 2-core machine they share 2 cores,
as the single device's intra-op threads already do. What this measures is the cost of sharding
(partitioning, padding, gathering) and that the numbers do not change; the speed-up belongs to
machines with several real accelerators.

    python benchmarks/devices.py            # the docs/benchmarks.md table (a few minutes on 2 cores)
    python benchmarks/devices.py --quick    # smaller sizes, for a smoke run
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

SIZES = {
    "default": dict(depths=(4,), widths=(128,), prompt_lens=(16,), lengths=(1024,), seeds=tuple(range(8)), n_pairs=4),
    "quick": dict(depths=(2,), widths=(32,), prompt_lens=(8,), lengths=(256,), seeds=tuple(range(4)), n_pairs=2),
}


def child(size: str) -> dict:
    """One run on however many devices this process sees: timings and a digest of the offsets."""
    import jax
    import numpy as np

    import nohair_jax as nh
    from nohair_jax.sweep import cell_models

    grid = nh.SweepGrid(**SIZES[size], n_boot=200)
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        nh.run_sweep(grid, out, progress=False)
        sweep_s = time.perf_counter() - start
    cell = grid.cells()[0]
    models = cell_models(cell, grid)
    pairs = nh.random_prompt_pairs(grid.pair_seed, grid.n_pairs, cell.prompt_len, cell.length, grid.vocab_size)
    times = []
    for _ in range(2):  # compiled by the sweep above: this is the sharded computation alone
        start = time.perf_counter()
        offsets = nh.sweep_offsets(models, *pairs)
        times.append(time.perf_counter() - start)
    digest = hashlib.sha256(np.stack([o.l2 for o in offsets]).tobytes()).hexdigest()[:12]
    return dict(devices=jax.device_count(), sweep_s=sweep_s, offsets_s=min(times), digest=digest)


def run_child(devices: int, size: str) -> dict:
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
    done = subprocess.run([sys.executable, __file__, "--child", size], env=env, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--repeats", type=int, default=3, help="runs per device count (default 3)")
    parser.add_argument("--child", choices=SIZES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child)))
        return
    size = "quick" if args.quick else "default"
    s = SIZES[size]
    print(f"{os.cpu_count()} CPU cores; sweep of one cell: depth {s['depths'][0]}, d_model {s['widths'][0]}, "
          f"P = {s['prompt_lens'][0]}, T = {s['lengths'][0]}, {len(s['seeds'])} seeds x {s['n_pairs']} pairs")
    runs = {1: [], 4: []}
    for repeat in range(args.repeats):
        for devices in runs:
            r = run_child(devices, size)
            runs[devices].append(r)
            print(f"  run {repeat + 1}, {devices} device(s): sweep {r['sweep_s']:.1f} s, offsets {r['offsets_s']:.2f} s, "
                  f"digest {r['digest']}", flush=True)
    print(f"\n{'devices':>7}  {'sweep s (median)':>16}  {'offsets s (best)':>16}  {'offsets s (median)':>18}")
    for devices, rs in runs.items():
        print(f"{devices:>7}  {statistics.median(r['sweep_s'] for r in rs):>16.1f}  "
              f"{min(r['offsets_s'] for r in rs):>16.2f}  {statistics.median(r['offsets_s'] for r in rs):>18.2f}")
    ratio = statistics.median(r["offsets_s"] for r in runs[1]) / statistics.median(r["offsets_s"] for r in runs[4])
    same = len({r["digest"] for rs in runs.values() for r in rs}) == 1
    print(f"\nspeed-up of the sharded offsets, one device -> four (medians): {ratio:.2f}x; "
          f"offsets identical on one and four devices: {same}")


if __name__ == "__main__":
    main()
