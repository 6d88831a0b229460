#!/usr/bin/env bash
# A diagnostic lease (after ort.part00-04 are staged): why a pipeline layout runs far below the GPU. Stages
# part 05, installs onnxruntime-gpu, then runs tools/bench/gpu_pipeline.py phases side by side that differ
# in one setting each (threads per inference worker, I/O binding, workers), with the busiest processes
# printed halfway through each. Logs in $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/edge-sdk-out}
mkdir -p "$OUT" "$HOME/stage" && cp .gpu/ort/c5/* "$HOME/stage/"
bash tools/gpu/install_ort.sh || exit 1
export PYTHONPATH="$HOME/ortsite:$HOME/site:$PWD"
common=(--seconds 6 --warmup 2 --skip-baseline --ps --cache "$HOME/probe-cache" --total-seconds 90)
run() { echo "=== $*"; timeout 120 python3 tools/bench/gpu_pipeline.py "$@" "${common[@]}" 2>&1 | grep -v "^skipping Tensorrt"; }
{
  nproc; nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
  run --variants split --layouts 4x8
  run --variants split --layouts 4x8 --inference-threads 2
  run --variants split --layouts 4x8 --io-binding off
  run --variants full --layouts 8x8 --inference-threads 2
  run --variants split --layouts 8x8 --inference-threads 2
} 2>&1 | tee "$OUT/probe.log"
