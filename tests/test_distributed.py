"""Two JAX processes on loopback (``jax.distributed`` with gloo collectives on CPU) against one.

A sweep cell run as two processes must give arrays identical to the one-process run, with only process
0 writing (process 1 is pointed at a folder of its own, which must stay empty); the packaged real
model's offsets, pairs split over the processes, must equal ``prompt_pair_offsets`` on one device.
Both run in one pair of processes (``tests/distributed_worker.py``): starting them is most of the cost.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np

import nohair_jax as nh
from distributed_worker import GRID
from nohair_jax.experiments.real_model import available

WORKER = Path(__file__).with_name("distributed_worker.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_sweep_and_the_real_models_offsets_over_two_processes_equal_one_process(tmp_path, assert_same_cells):
    one, two, other = tmp_path / "one", tmp_path / "two", tmp_path / "process1"
    nh.run_sweep(nh.SweepGrid(**GRID), one, progress=False)
    real_model = [] if available() else ["real_model"]  # the packaged model is installed by `make test`
    # One CPU device each: the session's XLA flags (tests/conftest.py) without any device count.
    flags = " ".join(f for f in os.environ.get("XLA_FLAGS", "").split() if "device_count" not in f)
    port, env = _free_port(), dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=flags)
    procs = [subprocess.Popen([sys.executable, str(WORKER), str(port), str(i), str(out), *real_model], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i, out in enumerate((two, other))]
    for proc in procs:
        log = proc.communicate(timeout=300)[0]
        assert proc.returncode == 0, log[-3000:]
    assert not other.exists()  # process 1 computed everything and wrote nothing

    assert_same_cells(one, two / "sweep", 1)

    if real_model:
        with np.load(two / "offsets.npz") as got:
            assert got["l2"].shape == (4, 5, 40)
            np.testing.assert_array_equal(got["l2"], got["alone_l2"])
            np.testing.assert_allclose(got["kl"], got["alone_kl"], rtol=1e-5, atol=1e-8)
