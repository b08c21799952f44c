#!/usr/bin/env bash
# Download, here, the wheels that the GPU machine's image lacks (it has no network), into .whl/.
# The device command then installs them with:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
#   export PYTHONPATH=/tmp/site:src
# (see scripts/gpu.sh). Versions pinned to what the CPU venv uses.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
      --platform manylinux2014_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 --platform any)
pkgs=(
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types typing-inspection
  gymnasium==1.4.0 farama-notifications tomli-w
  optuna==5.0.0 alembic colorlog sqlalchemy mako greenlet
  arch==8.0.0
  stable-baselines3==2.9.2
  pytest-xdist==3.8.0 execnet==2.1.2   # ktests: Triton's compile time spread over the GPU machine's cores
  cmaes   # optuna's CMA-ES sampler (foxhunt tune); scikit-learn, joblib, scipy: already in the GPU image
)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${plat[@]}" -d .whl "${pkgs[@]}"
ls -la .whl
du -sh .whl
