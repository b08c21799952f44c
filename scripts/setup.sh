#!/usr/bin/env bash
# Create .venv and install foxhunt into it.
#   scripts/setup.sh        runtime only
#   scripts/setup.sh test   runtime + test dependencies (pytest, hypothesis, empyrical-reloaded, triton, backtesting)
# torch: a CUDA machine keeps/gets the default build; elsewhere the CPU build is installed first so
# that pip does not pull several GB of CUDA libraries onto a machine without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
if ! python -c "import torch" >/dev/null 2>&1; then
  if command -v nvidia-smi >/dev/null 2>&1; then
    python -m pip install -q "torch>=2.10"
  else
    # A CPU wheel: the local one where this workplace provides it, else PyTorch's CPU index.
    python -m pip install -q "torch==2.13.0" 2>/dev/null \
      || python -m pip install -q "torch>=2.10" --index-url https://download.pytorch.org/whl/cpu
  fi
fi
extra=""
if [ "${1:-}" = "test" ]; then extra="[test]"; fi
python -m pip install -q -e ".${extra}"
echo "foxhunt installed in $(pwd)/.venv ($(python -c 'import torch; print("torch", torch.__version__)'))"
