#!/usr/bin/env bash
# One lease on the NVIDIA host, in two calls after ort.part00-04 were staged (see docs/hardware.md):
#   a: stage part 05, install onnxruntime-gpu, verify.sh (providers, doctor, the fold, the demo on
#      x86-cpu and x86-nvidia, the equivalence gate on CUDA), then the whole suite in shards
#   b: the GPU benchmarks (tools/bench/gpu_throughput.py, tools/bench/gpu_pipeline.py)
# Budgets are small on purpose: a lease is minutes. Logs land in $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/edge-sdk-out}
mkdir -p "$OUT"
case "${1:-}" in
  a)
    mkdir -p "$HOME/stage" && cp .gpu/ort/c5/* "$HOME/stage/"
    timeout 200 bash tools/gpu/verify.sh
    SUITE_SHARDS=${SUITE_SHARDS:-8} SUITE_TIMEOUT=${SUITE_TIMEOUT:-170} bash tools/gpu/suite.sh
    ;;
  b)
    export PYTHONPATH="$HOME/ortsite:$HOME/site:$PWD"
    python3 tools/bench/gpu_throughput.py --seconds 1.0 --batches 1,32,256 --total-seconds 170 2>&1 |
      tee "$OUT/gpu_throughput.log"
    python3 tools/bench/gpu_pipeline.py --seconds 8 --warmup 2 --total-seconds 120 2>&1 | tee "$OUT/gpu_pipeline.log"
    ;;
  *) echo "usage: $0 a|b" >&2; exit 2 ;;
esac
