"""Shared fixtures: the tiny model most measurement tests run on.

``TINY`` is its config (vocab 64, d_model 32, 4 heads, 3 layers, learned positions up to 64
tokens): small enough to compile in a second, deep enough to have relay (layers >= 2).
``make_tiny(seed=0, **overrides)`` builds a ``Transformer`` of it with any field changed.
``assert_same_cells(a, b, n_cells)`` checks two sweep folders' cells equal. ``LONGEST_FIRST``: the
slowest tests start first, so that the two workers finish together. The session shares one
persistent XLA compilation cache and compiles without XLA's backend optimisations (below).
Tests that need another architecture on purpose (a reference implementation's case list, a
closed form that needs one head) build their own and say why.
"""

import json
import os
import shutil
import tempfile
from pathlib import Path

# One persistent XLA compilation cache for the whole session, set before JAX is imported: the xdist
# workers, the CLI subprocesses and the reproduction's workers compile the same small programs
# again and again, and a cached executable is the same code (the same bits out), found in a
# fraction of the compile time. A cache of the caller's own (JAX_COMPILATION_CACHE_DIR) is used as is.
_OWN_CACHE = "JAX_COMPILATION_CACHE_DIR" not in os.environ
if _OWN_CACHE:
    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="nohair-tests-xla-")
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"
# XLA's backend optimisations and its newer fusion emitters off for the suite's own processes: the
# tests' programs are tiny and compiled once each, so compiling is most of their time (test_model and
# test_layer_measures: 115 s with the optimisations off alone, 77 s with the older emitters too).
# The cost: a bug that only the default code generation shows would pass here; benchmarks,
# experiments and `nohair reproduce` run with the defaults. A caller's own XLA_FLAGS are kept as they are.
if "XLA_FLAGS" not in os.environ:
    os.environ["XLA_FLAGS"] = "--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false"

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from flax import nnx  # noqa: E402

import nohair_jax as nh  # noqa: E402

TINY = dict(vocab_size=64, d_model=32, n_heads=4, n_layers=3, max_len=64)

# The suite's longest tests (measured: 20 to 140 s each on 2 CPU cores), run first: pytest-xdist
# hands out tests in collection order, and the longest one started last would leave the other
# worker idle while it finishes.
LONGEST_FIRST = (
    "test_reproduce.py::test_tiny_profile_end_to_end",
    "test_chat.py::test_cli_prompts_on_smollm2_writes_the_result_set",
    "test_readme.py::test_every_command_runs[prompts",
    "test_gguf_checkpoint.py::test_smollm_matches_transformers_float64",
    "test_readme.py::test_python_example_prints_what_the_readme_shows",
    "test_distributed.py::",
    "test_benchmarks.py::test_gpu_script_smoke_run_agrees_with_transformers",
    "test_readme.py::test_every_command_runs[",
    "test_notebooks.py::",
    "test_gguf_checkpoint.py::test_smollm_matches_transformers_float32",
    "test_interrupt.py::",
)


def pytest_sessionfinish(session, exitstatus):
    if _OWN_CACHE:  # only the process that made the cache (xdist's workers inherit its variable)
        shutil.rmtree(os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    rank = lambda item: next((i for i, key in enumerate(LONGEST_FIRST) if key in item.nodeid), len(LONGEST_FIRST))
    items.sort(key=rank)  # stable: every other test keeps its order


@pytest.fixture
def tiny_config() -> nh.TransformerConfig:
    return nh.TransformerConfig(**TINY)


@pytest.fixture
def make_tiny():
    def make(seed: int = 0, **overrides) -> nh.Transformer:
        return nh.Transformer(nh.TransformerConfig(**{**TINY, **overrides}), rngs=nnx.Rngs(seed))
    return make


@pytest.fixture
def assert_same_cells():
    """``check(a, b, n_cells)``: sweep folders ``a`` and ``b`` hold the same ``n_cells`` cells, every
    NPZ array bit for bit and every JSON record equal but for the seconds each cell took."""
    def check(a: Path, b: Path, n_cells: int) -> None:
        names = sorted(p.name for p in (a / "cells").iterdir())
        assert names == sorted(p.name for p in (b / "cells").iterdir()) and len(names) == 2 * n_cells
        for name in names:
            if name.endswith(".npz"):
                with np.load(a / "cells" / name) as x, np.load(b / "cells" / name) as y:
                    assert sorted(x) == sorted(y)
                    for key in x:
                        np.testing.assert_array_equal(x[key], y[key], err_msg=f"{name}: {key}")
            else:
                x, y = (json.loads((f / "cells" / name).read_text()) for f in (a, b))
                assert x.pop("seconds") > 0 and y.pop("seconds") > 0 and x == y
    return check


@pytest.fixture
def derivation_output(capsys):
    """``run(theory)``: run a sympy derivation of ``nohair_jax.theory`` (its ``main``, what ``python -m`` runs: every
    step asserts its claims while it prints), check it is the repository's ``theory/`` file, that it ends with "all
    checks passed" and numbers its steps 1 to 7; returns what it printed."""
    def run(theory) -> str:
        name = theory.__name__.rsplit(".", 1)[-1]
        assert Path(theory.__file__).resolve().parts[-2:] == ("theory", f"{name}.py")
        theory.main()
        printed = capsys.readouterr().out
        assert printed.rstrip().endswith("all checks passed")
        for step in range(1, 8):
            assert f"\n{step}. " in "\n" + printed
        return printed
    return run
