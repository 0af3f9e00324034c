"""Offset throughput and the fraction of this machine's matrix-multiply peak it reaches.

Everything is measured side by side in one run (shared machines drift; ratios are what hold):
  1. the peak: a large float32 jnp.dot, in FLOP/s;
  2. for d_model 128 and 512 and T 1024 and 4096: tokens per second of ``prompt_pair_offsets``
     (both sequences of a pair counted) and model FLOP utilisation, in the useful FLOPs of
     ``mfu.useful_flops`` (XLA's cost analysis counts a loop body once, so it cannot count the
     blockwise attention);
  3. pairs per call 1 against 2 and 4 (batched), the chunking choice of the offsets module.

    python benchmarks/offsets.py            # the table (a few minutes on 2 CPU cores)
    python benchmarks/offsets.py --quick    # smaller sizes, for a smoke run
"""

from __future__ import annotations

import argparse
import time

import jax

import nohair_jax as nh
from mfu import matmul_case, useful_flops  # benchmarks/ is on the path when a script in it runs
from nohair_jax.model import untrained_model


def best_time(fn, repeats: int) -> float:
    """Fastest of ``repeats`` runs after one warm-up (compilation), in seconds."""
    jax.block_until_ready(fn())
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    return min(times)


def offsets_rate(d_model: int, length: int, pairs_per_call: int, n_pairs: int, repeats: int) -> dict:
    """Tokens/s and FLOP/s of prompt_pair_offsets for a 4-layer model, P = 16."""
    model = untrained_model(4, d_model=d_model, max_len=length + 16)
    pairs = nh.random_prompt_pairs(0, n_pairs, 16, length, model.config.vocab_size)
    seconds = best_time(lambda: nh.prompt_pair_offsets(model, *pairs, pairs_per_call=pairs_per_call).l2, repeats)
    flops = 2 * n_pairs * useful_flops(model.config, 16 + length)
    tokens = 2 * n_pairs * (16 + length)
    return dict(tokens_per_s=tokens / seconds, flops_per_s=flops / seconds, seconds=seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes only")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    widths, lengths = ((128,), (256, 1024)) if args.quick else ((128, 512), (1024, 4096))

    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, {jax.device_count()} device(s)")
    dot, dot_flops = matmul_case(1024 if args.quick else 2048)
    peak = dot_flops / best_time(dot, args.repeats)
    print(f"matmul peak (float32, highest precision): {peak / 1e9:.1f} GFLOP/s\n")

    print(f"{'d_model':>7} {'T':>5} {'pairs/call':>10} {'tokens/s':>10} {'GFLOP/s':>8} {'of peak':>7} {'vs 1 pair/call':>14}")
    for d_model in widths:
        for length in lengths:
            # Batching is only compared where its attention memory stays small.
            per_call = (1, 2, 4) if length <= 1024 else (1, 2)
            n_pairs = 4
            base = None
            for k in per_call:
                r = offsets_rate(d_model, length, k, n_pairs, args.repeats)
                base = base or r["tokens_per_s"]
                print(
                    f"{d_model:>7} {length:>5} {k:>10} {r['tokens_per_s']:>10.0f} {r['flops_per_s'] / 1e9:>8.1f} "
                    f"{r['flops_per_s'] / peak:>7.1%} {r['tokens_per_s'] / base:>14.2f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
