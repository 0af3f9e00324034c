#!/usr/bin/env bash
# The GPU benchmark in one command (under five minutes once installed): bash benchmarks/gpu.sh
# Installs the package with jax[cuda12] into $VENV (default .venv-gpu) the first time.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv-gpu}
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q -e '.[cuda]'
fi
exec timeout 300 "$VENV/bin/python" benchmarks/gpu.py
