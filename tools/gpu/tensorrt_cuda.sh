#!/usr/bin/env bash
# The tensorrt backend's CUDA half on the offline NVIDIA host (TensorRT itself is not there): the `cuda`
# tests of tests/backends/tensorrt through cuda-python and pycuda, then tools/bench/cuda_buffers.py.
# Here first: `bash tools/gpu/suite.sh prepare wheels`, and pycuda's wheel (../shared/wheels) with its pure
# dependencies in .gpu/pycuda:
#   mkdir -p .gpu/pycuda && cp ../shared/wheels/pycuda-*.whl .gpu/pycuda/ && python3 -m pip download \
#     --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 --platform any \
#     -d .gpu/pycuda pytools platformdirs mako siphash24 markupsafe
# There, carrying .gpu/wheels and .gpu/pycuda:  bash tools/gpu/tensorrt_cuda.sh [pytest args]
# Logs: $OUT/tensorrt_tests.txt, $OUT/cuda_buffers.txt (and .json), $OUT/setup.txt.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root" || exit 1
OUT=${OUT:-/tmp/edge-sdk-out}
mkdir -p "$OUT"
venv=${SUITE_VENV:-$HOME/venv}
bash tools/gpu/suite.sh setup > "$OUT/setup.log" 2>&1 || { tail -40 "$OUT/setup.log"; exit 1; }
"$venv/bin/python" -m pip install -q --no-index --no-deps --no-compile --target "$HOME/pycuda-site" .gpu/pycuda/*.whl ||
  echo "WARNING: pycuda did not install; its tests skip"
export PYTHONPATH=$HOME/pycuda-site PYTHONUNBUFFERED=1
"$venv/bin/python" - <<'PY'
import importlib
for name in ("numpy", "cupy", "cuda.bindings", "pycuda", "edge_sdk"):
    try:
        module = importlib.import_module(name)
        print(f"{name} {getattr(module, '__version__', '')}")
    except Exception as exc:
        print(f"{name}: {type(exc).__name__}: {exc}")
PY
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "== tests"
timeout 300 "$venv/bin/python" -m pytest -q -rs -p no:cacheprovider tests/backends/tensorrt "$@" 2>&1 | tee "$OUT/tensorrt_tests.txt"
echo "== bench"
timeout 200 "$venv/bin/python" tools/bench/cuda_buffers.py --json "$OUT/cuda_buffers.json" 2>&1 | tee "$OUT/cuda_buffers.txt"
