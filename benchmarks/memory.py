"""Peak memory of one prompt_pair_offsets call against T, and the time of the longest one.

One pair, a 4-layer d_model 128 model (4 heads of 32, learned positions), P = 16. Every T runs in
a fresh process (``--child``), which reports:

  * XLA's plan for the compiled call (``memory_analysis``): scratch ("temp") bytes, and
    arguments + outputs (parameters, tokens, the offsets);
  * the process's peak resident memory (``ru_maxrss``): everything, the JAX runtime and the
    compiler included, so the figure to hold against a machine's memory; on a GPU also the
    device's peak bytes in use;
  * compile and run seconds of the call.

Linear growth shows as a flat bytes/T column. The plain path runs only up to 8192 positions: its
[heads, T, T] weights are 17 GB per head at T = 65536.

    python benchmarks/memory.py                       # T = 1k .. 64k (~10 min on 2 CPU cores)
    python benchmarks/memory.py --lengths 1024 2048   # a smoke run
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import jax

import nohair_jax as nh
from nohair_jax.model import untrained_model
from nohair_jax.model import split_stacked_blocks
from nohair_jax.offsets import _pairs_call, check_pairs, pair_offsets

PROMPT_LEN = 16
PLAIN_MAX = 8192  # never the plain path at 16k or more: [H, T, T] float32 weights of 4+ GB


def child(implementation: str, length: int, d_model: int, n_layers: int) -> dict:
    """Compile and run one offsets call in this process; what it cost."""
    model = untrained_model(n_layers, d_model=d_model, max_len=PROMPT_LEN + length)
    model.set_attributes(implementation=implementation)
    pairs = check_pairs(model.config, *nh.random_prompt_pairs(0, 1, PROMPT_LEN, length, model.config.vocab_size))
    graphdef, state, blocks = split_stacked_blocks(model)
    with jax.default_matmul_precision("highest"):  # as prompt_pair_offsets runs it
        start = time.perf_counter()
        compiled = _pairs_call.lower(pair_offsets, graphdef, state, blocks, *pairs).compile()
        compile_s = time.perf_counter() - start
        start = time.perf_counter()
        jax.block_until_ready(compiled(state, blocks, *pairs))
        run_s = time.perf_counter() - start
    stats = compiled.memory_analysis()
    device = jax.devices()[0].memory_stats()  # None on a CPU
    return dict(
        implementation=implementation,
        length=length,
        temp=stats.temp_size_in_bytes,
        io=stats.argument_size_in_bytes + stats.output_size_in_bytes,
        rss=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,  # KiB on Linux
        device_peak=None if device is None else device.get("peak_bytes_in_use"),
        compile_s=compile_s,
        run_s=run_s,
    )


def measure(implementation: str, length: int, d_model: int, n_layers: int) -> dict:
    """``child`` in a fresh Python process, so its peak memory is this call's alone."""
    out = subprocess.run(
        [sys.executable, __file__, "--child", implementation, str(length), str(d_model), str(n_layers)],
        check=True, capture_output=True, text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def memory_table(lengths, d_model: int, n_layers: int) -> None:
    """One row per (T, path): the plain path up to PLAIN_MAX, the blockwise path at every T."""
    print(f"{'T':>6} {'attention':>9} {'XLA temp MB':>11} {'temp B/T':>9} {'args+out MB':>11} "
          f"{'peak RSS MB':>11} {'RSS B/T':>8} {'device MB':>9} {'compile s':>9} {'run s':>8}")
    for length in lengths:
        for implementation in ("plain", "blockwise") if length <= PLAIN_MAX else ("blockwise",):
            r = measure(implementation, length, d_model, n_layers)
            device = "-" if r["device_peak"] is None else f"{r['device_peak'] / 1e6:.1f}"
            print(f"{length:>6} {implementation:>9} {r['temp'] / 1e6:>11.1f} {r['temp'] / length:>9.0f} "
                  f"{r['io'] / 1e6:>11.1f} {r['rss'] / 1e6:>11.1f} {r['rss'] / length:>8.0f} {device:>9} "
                  f"{r['compile_s']:>9.1f} {r['run_s']:>8.1f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384, 32768, 65536])
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        implementation, *sizes = args.child
        print(json.dumps(child(implementation, *map(int, sizes))))
        return
    print(f"jax {jax.__version__} on {jax.devices()[0].device_kind}; d_model {args.d_model}, {args.layers} layers, "
          f"one pair, P = {PROMPT_LEN}; MB = 1e6 bytes\n")
    memory_table(args.lengths, args.d_model, args.layers)


if __name__ == "__main__":
    main()
