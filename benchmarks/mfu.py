"""Model FLOP utilisation of prompt_pair_offsets, plain against blockwise attention.

Everything is measured side by side in one run, in rounds: each round times the matrix-multiply
peak (a large float32 jnp.dot at full precision, fastest of 3) right before every case, so a
case's ratio to the peak compares runs seconds apart. Shared machines drift; the medians over rounds of these
ratios are what to compare between runs.

Useful FLOPs (``useful_flops``) count the matrix products a forward pass needs, for both
sequences of a pair: the q, k, v, o projections, the MLP, the output logits and the causal half
of attention (query i against keys 1..i, for q.k and for the weighted sum of values). The
masked half that the plain path also computes, norms, softmax and the offsets themselves are
not counted, so 100 % would be every cycle spent in a matmul at peak speed.

    python benchmarks/mfu.py                      # d_model 128/256/512 x T 1024/4096/8192
    python benchmarks/mfu.py --quick              # a smoke run (a minute or two)
    python benchmarks/mfu.py --widths 256 --lengths 1024 8192

Columns: tokens/s counts both sequences of a pair (2 (P + T) per pair); "of peak" is wall-clock
FLOP/s over the peak's; "of peak (cpu)" is the same ratio in process CPU time, which other jobs
on the machine disturb less (it is not a speed: idle waiting threads count in it too).
"""

from __future__ import annotations

import argparse
import glob
import os
import platform
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import nohair_jax as nh
from nohair_jax.attention import DEFAULT_BLOCK, blockwise_attention, plain_attention
from nohair_jax.model import untrained_model
from nohair_jax.model import TransformerConfig

PROMPT_LEN = 16


def machine() -> str:
    """Which machine a table came from: the CPU's model name, family and model number, widest vector
    unit, the L2 and L3 caches of its first core, and the cores this process may use. Different CPUs
    here report only "AMD EPYC" as their name, with matmul peaks from 139 to 199 GFLOP/s on two
    cores: the rest tells them apart."""
    fields = {}
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    name = fields.get("model name") or platform.processor() or platform.machine()
    parts = [name]
    if "cpu family" in fields:
        parts.append(f"family {fields['cpu family']} model {fields.get('model', '?')}")
    flags = fields.get("flags", "").split()
    if flags:
        parts.append(next((isa for isa in ("avx512f", "avx2", "avx") if isa in flags), "no avx").upper())
    caches = {}
    for index in sorted(glob.glob("/sys/devices/system/cpu/cpu0/cache/index*")):
        try:
            level, kind, size = (Path(index, f).read_text().strip() for f in ("level", "type", "size"))
        except OSError:
            continue
        if kind != "Instruction" and level in ("2", "3"):
            caches[f"L{level}"] = size
    parts += [f"{level} {size}" for level, size in caches.items()]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{', '.join(parts)}, {cores} cores"


def causal_attention_flops(heads: int, head_dim: int, length: int) -> float:
    """FLOPs of one sequence's causal attention: q.k and weights.v for query i on keys j <= i."""
    return 2 * 2 * heads * head_dim * length * (length + 1) / 2


def useful_flops(cfg: TransformerConfig, length: int) -> float:
    """FLOPs of the matrix products one forward pass over ``length`` tokens needs (causal half of attention)."""
    d, hd = cfg.d_model, cfg.head_dim
    projections = 2 * length * d * (2 * cfg.n_heads * hd + 2 * cfg.kv_heads * hd)
    mlp = 2 * length * d * cfg.mlp_width * (3 if cfg.mlp == "swiglu" else 2)
    attention = causal_attention_flops(cfg.n_heads, hd, length)
    logits = 2 * length * d * cfg.vocab_size
    return cfg.n_layers * (projections + mlp + attention) + logits


def matmul_case(n: int):
    """(thunk, FLOPs): an n x n float32 matrix product at full precision."""
    x = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    dot = jax.jit(lambda a: jnp.dot(a, a, precision="highest"))
    return (lambda: dot(x)), 2.0 * n**3


def offsets_case(d_model: int, length: int, implementation: str, block: int | None = None, n_layers: int = 4):
    """(thunk, FLOPs, tokens) of prompt_pair_offsets on one pair of a fresh untrained model."""
    model = untrained_model(n_layers, d_model=d_model, max_len=PROMPT_LEN + length)
    model.set_attributes(implementation=implementation, **({} if block is None else {"block_size": block}))
    pairs = nh.random_prompt_pairs(0, 1, PROMPT_LEN, length, model.config.vocab_size)
    sequence = PROMPT_LEN + length
    return (lambda: nh.prompt_pair_offsets(model, *pairs).l2), 2 * useful_flops(model.config, sequence), 2 * sequence


def attention_case(heads: int, length: int, kind: str, head_dim: int = 32):
    """(thunk, FLOPs): causal attention alone on [1, T, heads, head_dim] float32, one of
    "plain", "blockwise", "dot_product_attention" (jax.nn's, implementation="xla")."""
    q, k, v = jax.random.normal(jax.random.key(1), (3, 1, length, heads, head_dim), jnp.float32)
    fn = {
        "plain": lambda q, k, v: plain_attention(q, k, v)[0],
        "blockwise": blockwise_attention,
        "dot_product_attention": lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation="xla"),
    }[kind]
    run = jax.jit(fn)
    return (lambda: run(q, k, v)), causal_attention_flops(heads, head_dim, length)


def timed(thunk) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of one run, results ready."""
    wall, cpu = time.perf_counter(), time.process_time()
    jax.block_until_ready(thunk())
    return time.perf_counter() - wall, time.process_time() - cpu


def interleaved(peak, cases: dict, rounds: int, peak_repeats: int = 3) -> dict:
    """Per case: median FLOP/s and median ratios to the peak timed just before it, wall and CPU.

    ``peak`` is (thunk, FLOPs), ``cases`` maps a name to (thunk, FLOPs, ...). Every thunk runs once
    first (compilation), then ``rounds`` times, cases in turn, each right after ``peak_repeats``
    peak runs whose fastest is its peak: a fraction of a second, one run of the peak catches other
    jobs' bursts that a case of several seconds averages out, and would overstate the ratio.
    """
    for thunk, *_ in (peak, *cases.values()):
        jax.block_until_ready(thunk())
    samples = {name: [] for name in cases}
    peak_rates = []
    for _ in range(rounds):
        for name, (thunk, flops, *_) in cases.items():
            peak_wall, peak_cpu = np.min([timed(peak[0]) for _ in range(peak_repeats)], axis=0)
            wall, cpu = timed(thunk)
            samples[name].append((flops / wall, peak_wall / wall * flops / peak[1], peak_cpu / cpu * flops / peak[1]))
            peak_rates.append(peak[1] / peak_wall)
    out = {name: dict(zip(("flops_per_s", "of_peak", "of_peak_cpu"), np.median(np.array(s), axis=0))) for name, s in samples.items()}
    return {"peak": float(np.median(peak_rates)), **out}


def offsets_table(widths, lengths, blocks, plain_max: int, peak_n: int, rounds: int) -> None:
    """Throughput and MFU of prompt_pair_offsets per (d_model, T): plain (up to plain_max) and blockwise."""
    print(f"{'d_model':>7} {'T':>5} {'attention':>13} {'tokens/s':>9} {'GFLOP/s':>8} {'of peak':>8} "
          f"{'of peak (cpu)':>13} {'vs plain':>8} {'peak GFLOP/s':>12}")
    for d_model in widths:
        for length in lengths:
            cases = {}
            if length <= plain_max:
                cases["plain"] = offsets_case(d_model, length, "plain")
            for block in blocks:
                cases[f"blockwise {block}"] = offsets_case(d_model, length, "blockwise", block)
            result = interleaved(matmul_case(peak_n), cases, rounds)
            for name, (_, flops, tokens) in cases.items():
                r = result[name]
                speedup = f"{r['flops_per_s'] / result['plain']['flops_per_s']:.2f}" if "plain" in result else "-"
                print(f"{d_model:>7} {length:>5} {name:>13} {tokens * r['flops_per_s'] / flops:>9.0f} "
                      f"{r['flops_per_s'] / 1e9:>8.1f} {r['of_peak']:>8.1%} {r['of_peak_cpu']:>13.1%} {speedup:>8} "
                      f"{result['peak'] / 1e9:>12.1f}", flush=True)


def attention_table(heads: int, lengths, peak_n: int, rounds: int) -> None:
    """Causal attention alone: plain, jax.nn.dot_product_attention (xla) and blockwise, useful FLOPs."""
    print(f"\nattention alone, {heads} heads of 32, float32:")
    print(f"{'T':>5} {'implementation':>22} {'GFLOP/s':>8} {'of peak':>8} {'of peak (cpu)':>13}")
    for length in lengths:
        cases = {kind: attention_case(heads, length, kind) for kind in ("plain", "dot_product_attention", "blockwise")}
        result = interleaved(matmul_case(peak_n), cases, rounds)
        for kind in cases:
            r = result[kind]
            print(f"{length:>5} {kind:>22} {r['flops_per_s'] / 1e9:>8.1f} {r['of_peak']:>8.1%} {r['of_peak_cpu']:>13.1%}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes only")
    parser.add_argument("--widths", type=int, nargs="+", default=[128, 256, 512])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 8192])
    parser.add_argument("--blocks", type=int, nargs="+", default=[DEFAULT_BLOCK])
    parser.add_argument("--plain-max", type=int, default=4096, help="longest T to run the plain path at")
    parser.add_argument("--attention-lengths", type=int, nargs="*", default=[1024, 4096])
    parser.add_argument("--peak-n", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.quick:
        args.widths, args.lengths, args.attention_lengths, args.peak_n = [128], [512, 2048], [1024], 1024

    print(f"jax {jax.__version__} on {jax.devices()[0].device_kind}, {args.rounds} rounds, medians; "
          f"4 layers, P = {PROMPT_LEN}, one pair per call\n")
    with jax.default_matmul_precision("highest"):
        offsets_table(args.widths, args.lengths, args.blocks, args.plain_max, args.peak_n, args.rounds)
        if args.attention_lengths:
            attention_table(8, args.attention_lengths, args.peak_n, args.rounds)


if __name__ == "__main__":
    main()
