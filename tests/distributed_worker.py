"""One process of a two-process JAX job on loopback (``tests/test_distributed.py`` starts two).

    python distributed_worker.py PORT PROCESS_ID OUT [real_model]

``run_sweep(GRID, OUT / "sweep")`` over the global mesh (only process 0 may write); with
``real_model``, then the packaged SmolLM2's offsets (its first 4 of 30 blocks: the split over
processes is what is tested) on 4 random-token pairs through
``sweep_offsets`` (pairs split over the two processes' devices), saved by process 0 as
``OUT/offsets.npz`` beside the same pairs through ``prompt_pair_offsets`` on process 0's device
alone (``alone_l2``, ``alone_kl``).
"""

from __future__ import annotations

import sys
from pathlib import Path

GRID = dict(depths=(2,), widths=(32,), prompt_lens=(4,), lengths=(48,), seeds=(0, 1), n_pairs=3, fit_t_min=4, n_boot=20)


def main(port: int, process_id: int, out: Path, real_model: bool) -> None:
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=process_id)
    assert jax.process_count() == 2 and len(jax.devices()) == 2 * len(jax.local_devices())

    import nohair_jax as nh
    from nohair_jax.results import save_npz
    from nohair_jax.offsets import sweep_offsets

    nh.run_sweep(nh.SweepGrid(**GRID), out / "sweep", progress=False)
    if real_model:
        from nohair_jax.experiments import first_layers

        model = first_layers(nh.load_checkpoint("smollm2-135m")[0], 4)
        pairs = nh.random_prompt_pairs(3, 4, 6, 40, model.config.vocab_size)
        (off,) = sweep_offsets([model], *pairs)
        if jax.process_index() == 0:  # and the same pairs unsplit, on this process's device alone
            alone = nh.prompt_pair_offsets(model, *pairs)
            save_npz(out / "offsets.npz", l2=off.l2, kl=off.kl, alone_l2=alone.l2, alone_kl=alone.kl)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]), sys.argv[4:] == ["real_model"])
