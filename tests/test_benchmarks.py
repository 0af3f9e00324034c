"""The benchmark scripts that a GPU session runs once, with its device time counted: checked here first.

``benchmarks/gpu.py --smoke`` runs every table of ``bash benchmarks/gpu.sh`` at toy sizes on the CPU,
the real-model table on a 2-layer SmolLM2 with random weights written as a safetensors folder and
read by both the project and transformers: the offsets of the two must agree, which they can only
if the folder, both loaders and the device handling are right.
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def real_model_module():
    """benchmarks/real_model.py as a module (it needs transformers: the test is skipped without)."""
    pytest.importorskip("transformers")
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import real_model
    finally:
        sys.path.remove(str(BENCHMARKS))
    return real_model


def test_random_weights_have_the_packaged_models_architecture():
    SMOLLM2_135M = real_model_module().SMOLLM2_135M
    from nohair_jax.checkpoints import gguf_file
    from nohair_jax.checkpoints import packaged_model_path

    path = packaged_model_path("smollm2-135m")
    packaged = gguf_file.hf_config(gguf_file.open_gguf(path), str(path))
    assert {key: value for key, value in SMOLLM2_135M.items() if key != "architectures"} == packaged


def test_gpu_script_smoke_run_agrees_with_transformers():
    pytest.importorskip("transformers")
    run = subprocess.run([sys.executable, "-u", str(BENCHMARKS / "gpu.py"), "--smoke"], capture_output=True,
                         text=True, timeout=600, cwd=BENCHMARKS)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    out = run.stdout
    for table in ("attention alone", "peak memory", "SmolLM2-135M's architecture, random weights, (2 layers"):
        assert table in out, out
    agreement = re.search(r"agreement with the project's offsets .*", out)
    assert agreement, out
    # one l2 and one KL per transformers variant (sdpa, sdpa at log t, eager), each a relative difference
    values = [float(x) for x in re.findall(r"(?:l2|KL) ([0-9.e+-]+)", agreement.group(0))]
    assert len(values) == 6, agreement.group(0)
    assert max(values) < 1e-4, agreement.group(0)
    # the last two ratios of a row: against sdpa, and against sdpa at log t (itself: exactly 1)
    same_work = re.search(r" transformers sdpa, log t .* ([0-9.]+)x +([0-9.]+)x +[0-9]+\n", out)
    assert same_work and same_work.group(2) == "1.00", out


def test_speed_figure_draws_lengths_with_different_tools(tmp_path):
    speed_figure = real_model_module().speed_figure
    ceilings = {"nohair": 1.0, "nohair, KL at log t": 0.8}
    every_tool = {"nohair": 2.0, "nohair, KL at log t": 1.5, "transformers sdpa": 3.0, "TransformerLens": 4.0}
    without_lens = {name: value for name, value in every_tool.items() if name != "TransformerLens"}  # past --eager-max
    path = tmp_path / "speed.png"
    speed_figure({1024: (every_tool, ceilings), 8192: (without_lens, ceilings)}, "test", path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
