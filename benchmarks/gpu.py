"""The benchmarks of mfu.py, memory.py and real_model.py at GPU sizes, in one command of under five minutes.

    bash benchmarks/gpu.sh            # on the lent GPU machine: its own python3 (jax with CUDA), nothing installed
    python benchmarks/gpu.py --smoke  # every table at toy sizes on any backend: the script checked before device time

Prints the same tables: offsets throughput and MFU against the float32 matmul peak (full
precision, no TF32), plain against blockwise attention; attention alone, with
jax.nn.dot_product_attention; peak memory against T; last, the real 30-layer model's table
(SmolLM2-135M at T 1024 and 8192: the project's three variants, and transformers where torch has
CUDA, on the GPU). The model is the packaged GGUF file where it is installed, else its
architecture with random weights (``real_model.py --weights random``: the same times; the lent
GPU machines reach no registry and a call carries no file that large). On a GPU the blockwise
path runs every pair of query blocks at once (``blockwise_attention``'s accelerator schedule),
in blocks of 1024.
"""

from __future__ import annotations

import argparse
import os

import flax
import jax

from memory import memory_table
from mfu import attention_table, offsets_table
from nohair_jax.checkpoints import CheckpointError, packaged_model_path
from real_model import CHECKPOINT, TORCH_DEVICE, run_table, torch, transformers


def real_model_weights() -> str | None:
    """"packaged" where the GGUF file is installed, else "random" where transformers can write the
    architecture, else None (with the reason printed)."""
    try:
        packaged_model_path(CHECKPOINT)
        return "packaged"
    except CheckpointError as error:
        if transformers is None:
            print(f"\nthe real model: skipped ({error}; no transformers for random weights either)")
            return None
        print(f"\nthe real model's file is not installed here: its architecture with random weights ({error})")
        return "random"


# What each table measures: at GPU sizes, and at toy sizes on any backend (--smoke) to check the script.
SIZES = {
    "gpu": dict(offsets=dict(widths=[256, 1024], lengths=[4096, 32768], blocks=[1024], plain_max=4096),
                attention=dict(heads=32, lengths=[4096, 8192]), peak_n=8192, rounds=3,
                memory=dict(lengths=[4096, 16384, 65536], d_model=128, n_layers=4),
                real=dict(lengths=[1024, 8192], repeats=2, eager_max=0, threads=1, n_layers=None)),
    "smoke": dict(offsets=dict(widths=[32], lengths=[256], blocks=[128], plain_max=256),
                  attention=dict(heads=2, lengths=[256]), peak_n=256, rounds=1,
                  memory=dict(lengths=[256], d_model=32, n_layers=2),
                  real=dict(lengths=[64], repeats=1, eager_max=64, threads=os.cpu_count(), n_layers=2)),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true",
                        help="toy sizes on any backend (2-layer random model, T 64): checks the script, measures nothing")
    smoke = parser.parse_args().smoke
    if jax.default_backend() != "gpu" and not smoke:
        raise SystemExit(f"no GPU: jax {jax.__version__} runs on {jax.default_backend()} (bash benchmarks/gpu.sh "
                         "on a GPU machine; --smoke checks the script here)")
    size = SIZES["smoke" if smoke else "gpu"]
    peak_n, rounds = size["peak_n"], size["rounds"]
    print(f"jax {jax.__version__}, flax {flax.__version__} on {jax.devices()[0].device_kind}; medians of {rounds} "
          f"rounds; 4 layers, P = 16, one pair per call" + (" (smoke: toy sizes)" if smoke else "") + "\n")
    with jax.default_matmul_precision("highest"):
        offsets_table(**size["offsets"], peak_n=peak_n, rounds=rounds)
        attention_table(**size["attention"], peak_n=peak_n, rounds=rounds)
    memory = size["memory"]
    print(f"\npeak memory, d_model {memory['d_model']}, {memory['n_layers']} layers:")
    memory_table(**memory)
    weights = "random" if smoke else real_model_weights()
    if weights is None:
        return
    with_torch = torch is not None and (smoke or TORCH_DEVICE == "cuda")
    print("\nthe real model" + ("" if with_torch else " (transformers not run: no torch with CUDA here)") + ":")
    run_table(**size["real"], n_pairs=1, peak_n=peak_n, with_torch=with_torch, weights=weights)


if __name__ == "__main__":
    main()
