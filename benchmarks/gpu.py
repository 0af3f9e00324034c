"""The benchmarks of mfu.py and memory.py at GPU sizes, in one command of under five minutes.

    bash benchmarks/gpu.sh            # installs jax[cuda12] into .venv-gpu first if needed

Prints the same tables: offsets throughput and MFU against the float32 matmul peak (full
precision, no TF32), plain against blockwise attention; attention alone, with
jax.nn.dot_product_attention; peak memory against T. On a GPU the blockwise path runs every pair
of query blocks at once (``blockwise_attention``'s accelerator schedule), in blocks of 1024.
"""

from __future__ import annotations

import jax

from memory import memory_table
from mfu import attention_table, offsets_table


def main() -> None:
    if jax.default_backend() != "gpu":
        raise SystemExit(f"no GPU: jax {jax.__version__} runs on {jax.default_backend()} (install jax[cuda12])")
    print(f"jax {jax.__version__} on {jax.devices()[0].device_kind}; 3 rounds, medians; 4 layers, P = 16, one pair per call\n")
    with jax.default_matmul_precision("highest"):
        offsets_table([256, 1024], [4096, 32768], blocks=[1024], plain_max=4096, peak_n=8192, rounds=3)
        attention_table(32, [4096, 8192], peak_n=8192, rounds=3)
    print("\npeak memory, d_model 128, 4 layers:")
    memory_table([4096, 16384, 65536], d_model=128, n_layers=4)


if __name__ == "__main__":
    main()
