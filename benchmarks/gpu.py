"""The benchmarks of mfu.py, memory.py and real_model.py at GPU sizes, in one command of under five minutes.

    bash benchmarks/gpu.sh            # installs jax[cuda12] and the packaged model into .venv-gpu first if needed

Prints the same tables: offsets throughput and MFU against the float32 matmul peak (full
precision, no TF32), plain against blockwise attention; attention alone, with
jax.nn.dot_product_attention; peak memory against T; last, the real 30-layer model's table
(SmolLM2-135M-Instruct at T 1024 and 8192: the project's three variants; transformers only where
torch has CUDA, which the pinned CPU wheel has not). On a GPU the blockwise path runs every pair
of query blocks at once (``blockwise_attention``'s accelerator schedule), in blocks of 1024.
"""

from __future__ import annotations

import jax

from memory import memory_table
from mfu import attention_table, offsets_table
from nohair_jax.checkpoints import CheckpointError, packaged_model_path
from real_model import CHECKPOINT, run_table, torch


def main() -> None:
    if jax.default_backend() != "gpu":
        raise SystemExit(f"no GPU: jax {jax.__version__} runs on {jax.default_backend()} (install jax[cuda12])")
    print(f"jax {jax.__version__} on {jax.devices()[0].device_kind}; 3 rounds, medians; 4 layers, P = 16, one pair per call\n")
    with jax.default_matmul_precision("highest"):
        offsets_table([256, 1024], [4096, 32768], blocks=[1024], plain_max=4096, peak_n=8192, rounds=3)
        attention_table(32, [4096, 8192], peak_n=8192, rounds=3)
    print("\npeak memory, d_model 128, 4 layers:")
    memory_table([4096, 16384, 65536], d_model=128, n_layers=4)
    try:
        packaged_model_path(CHECKPOINT)
    except CheckpointError as error:
        print(f"\nthe real model: skipped ({error})")
        return
    with_torch = torch is not None and torch.cuda.is_available()
    print("\nthe real model" + ("" if with_torch else " (transformers not run: no torch with CUDA here)") + ":")
    run_table([1024, 8192], n_pairs=1, repeats=2, eager_max=0, peak_n=8192, threads=1, with_torch=with_torch)


if __name__ == "__main__":
    main()
