"""Causal attention at SmolLM2's shapes: the project's blockwise kernel against torch's fused one,
on one core and on all of them, in one run.

What the real-model table (``real_model.py``) cannot tell apart: whether the project's attention is
slower than transformers' per core, or scales worse over cores. Each core count runs in its own
process, pinned as it starts (``os.sched_setaffinity``, before jax and torch make their thread
pools; torch gets as many threads), and in it the cases run interleaved round by round
(``mfu.interleaved``: a matmul peak right before each case):

  * ``nohair blockwise``: ``attention.blockwise_attention`` as the model calls it (default block,
    the CPU's lanes);
  * ``nohair blockwise, lanes 1``: the same tiles as one batched operation per step (the A/B of the
    lanes, docs/benchmarks.md);
  * ``torch sdpa``: ``scaled_dot_product_attention(is_causal=True, enable_gqa=True)``, the kernel
    transformers' sdpa path calls.

Shapes: both runs of a pair, q [2, P + T, 9, 64] on k, v [2, P + T, 3, 64] float32 (SmolLM2-135M's
9 query heads on 3 key/value heads of 64), P = 16. A timed case is ``--layers`` attention calls in a
row (a ``lax.scan`` for JAX, each call's input shifted by the last output so none is hoisted), as
in the model's 30 layers. FLOPs are useful ones (``mfu``'s causal half: query i on keys j <= i, for
q.k and for the weighted sum of values); "of peak" is against the matmul peak of the same process,
so of the cores it was given. "scaling" is the all-core speed over the one-core speed.

    python benchmarks/attention_cores.py                        # T 1024 and 4096
    python benchmarks/attention_cores.py --lengths 1024 --rounds 8
    make bench-attention

Needs torch (the test extra installs it).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np

from mfu import causal_attention_flops, interleaved, machine, matmul_case
from nohair_jax.attention import blockwise_attention

PROMPT_LEN = 16
HEADS, KV_HEADS, HEAD_DIM = 9, 3, 64  # SmolLM2-135M
VARIANTS = ("nohair blockwise", "nohair blockwise, lanes 1", "torch sdpa")


def attention_flops(sequence: int, layers: int) -> float:
    """Useful FLOPs of ``layers`` causal attentions over both runs of a pair of ``sequence`` tokens."""
    return layers * 2 * causal_attention_flops(HEADS, HEAD_DIM, sequence)


def worker(lengths: list[int], layers: dict[int, int], rounds: int) -> dict:
    """In a process pinned to its cores: per T, {variant: median FLOP/s and of peak}, the peak, and
    the largest difference of the project's outputs from torch's (relative to torch's largest)."""
    import torch  # here: the parent process only prints

    torch.set_num_threads(len(os.sched_getaffinity(0)))
    results = {}
    for length in lengths:
        sequence, count = PROMPT_LEN + length, layers[length]
        rng = np.random.default_rng(0)
        q = rng.standard_normal((2, sequence, HEADS, HEAD_DIM), dtype=np.float32)
        k, v = rng.standard_normal((2, 2, sequence, KV_HEADS, HEAD_DIM), dtype=np.float32)

        args = [jnp.asarray(x) for x in (q, k, v)]

        def in_a_row(attention):
            def run(q, k, v):
                def step(shift, _):
                    out = attention(q + shift, k, v)
                    return out[0, 0, 0, 0] * 1e-9, out[0, -1, 0, 0]
                return jax.lax.scan(step, jnp.zeros((), q.dtype), None, length=count)[1]
            compiled = jax.jit(run)
            return lambda: compiled(*args)

        tq, tk, tv = (torch.from_numpy(x).transpose(1, 2).contiguous() for x in (q, k, v))

        def sdpa(query):
            return torch.nn.functional.scaled_dot_product_attention(query, tk, tv, is_causal=True, enable_gqa=True)

        def torch_in_a_row():
            with torch.inference_mode():
                shift = 0.0
                for _ in range(count):
                    shift = float(sdpa(tq + shift)[0, 0, 0, 0]) * 1e-9

        with torch.inference_mode():
            expected = sdpa(tq).transpose(1, 2).numpy()
        attentions = dict(zip(VARIANTS, (blockwise_attention, functools.partial(blockwise_attention, lanes=1))))
        error = max(float(np.abs(np.asarray(attention(*args)) - expected).max() / np.abs(expected).max())
                    for attention in attentions.values())
        flops = attention_flops(sequence, count)
        cases = {name: (in_a_row(attention), flops) for name, attention in attentions.items()}
        cases["torch sdpa"] = (torch_in_a_row, flops)
        measured = interleaved(matmul_case(2048), cases, rounds)
        results[length] = {"peak": measured.pop("peak"), "error": error, "cases": measured}
    return results


def run_pinned(cores: int, args) -> dict:
    """The worker in a child process on the first ``cores`` of this process's cores; its results."""
    pinned = sorted(os.sched_getaffinity(0))[:cores]
    command = [sys.executable, __file__, "--worker", "--lengths", *map(str, args.lengths),
               "--layers", *map(str, args.layers), "--rounds", str(args.rounds)]
    child = subprocess.run(command, capture_output=True, text=True, preexec_fn=lambda: os.sched_setaffinity(0, pinned))
    if child.returncode != 0:
        raise SystemExit(f"the {cores}-core run failed:\n{child.stderr[-2000:]}")
    return {int(k): v for k, v in json.loads(child.stdout.splitlines()[-1]).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096], help="continuation lengths T")
    parser.add_argument("--layers", type=int, nargs="+", default=None,
                        help="attention calls per timed case, one per length (default 30 up to T 1024, then 4)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per case (medians)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.layers = args.layers or [30 if t <= 1024 else 4 for t in args.lengths]
    for name in ("lengths", "layers"):
        if min(getattr(args, name)) < 1:
            parser.error(f"--{name} must be positive, got {min(getattr(args, name))}")
    if args.rounds < 1:
        parser.error(f"--rounds must be positive, got {args.rounds}")
    if len(args.layers) != len(args.lengths):
        parser.error(f"--layers has {len(args.layers)} values for {len(args.lengths)} lengths")
    if args.worker:
        print(json.dumps(worker(args.lengths, dict(zip(args.lengths, args.layers)), args.rounds)))
        return
    available = len(os.sched_getaffinity(0))
    counts = [1] if available == 1 else [1, available]
    print(f"jax {jax.__version__} on {machine()}")
    runs = {}
    for cores in counts:
        print(f"running on {cores} core(s)...", flush=True)
        runs[cores] = run_pinned(cores, args)
    print(f"\n{'T':>5} {'cores':>5} {'variant':>26} {'ms/layer':>9} {'GFLOP/s':>8} {'of peak':>8} "
          f"{'vs sdpa':>8} {'scaling':>8} {'peak GFLOP/s':>12}")
    for length, layers in zip(args.lengths, args.layers):
        flops = attention_flops(PROMPT_LEN + length, layers) / layers
        for cores in counts:
            run = runs[cores][length]
            sdpa = run["cases"]["torch sdpa"]["flops_per_s"]
            for variant in VARIANTS:
                rate = run["cases"][variant]["flops_per_s"]
                scaling = rate / runs[1][length]["cases"][variant]["flops_per_s"]
                print(f"{length:>5} {cores:>5} {variant:>26} {flops / rate * 1e3:>9.1f} {rate / 1e9:>8.1f} "
                      f"{run['cases'][variant]['of_peak']:>8.1%} {rate / sdpa:>7.2f}x {scaling:>7.2f}x "
                      f"{run['peak'] / 1e9:>12.1f}")
        print(f"      the project's outputs against torch's: {max(runs[c][length]['error'] for c in counts):.1e} "
              "of its largest value")


if __name__ == "__main__":
    main()
