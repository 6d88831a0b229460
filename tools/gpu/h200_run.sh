#!/usr/bin/env bash
# One lease on the NVIDIA host, in three calls after ort.part00-04 were staged (see docs/hardware.md):
#   a: stage part 05, install onnxruntime-gpu, then the whole suite in shards (tools/gpu/suite.sh)
#   b: tools/bench/gpu_throughput.py (the CNN against PyTorch, the split detector with its host decode,
#      the uncut detector)
#   c: tools/bench/gpu_pipeline.py (8 decoded 1080p cameras, pipeline layouts against the plain loop),
#      then tools/gpu/verify.sh (providers, doctor, the fold, the demo on x86-cpu and x86-nvidia, the gate)
# Budgets are small on purpose: a lease is minutes. Logs land in $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/edge-sdk-out}
mkdir -p "$OUT"
export PYTHONPATH="$HOME/ortsite:$HOME/site:$PWD"
case "${1:-}" in
  a)
    mkdir -p "$HOME/stage" && cp .gpu/ort/c5/* "$HOME/stage/"
    SUITE_SHARDS=${SUITE_SHARDS:-8} SUITE_TIMEOUT=${SUITE_TIMEOUT:-300} bash tools/gpu/suite.sh
    ;;
  b)
    python3 tools/bench/gpu_throughput.py --seconds 1.0 --batches 1,32,256 --sections torch,cnn,split,detector \
      --total-seconds 330 2>&1 | tee "$OUT/gpu_throughput.log"
    ;;
  c)
    mkdir -p "$HOME/stage" && cp .gpu/ort/c5/* "$HOME/stage/" && bash tools/gpu/install_ort.sh || exit 1
    python3 tools/bench/gpu_pipeline.py --seconds 8 --warmup 2 --layouts 4x8,6x8 --total-seconds 300 2>&1 |
      tee "$OUT/gpu_pipeline.log"
    timeout 200 bash tools/gpu/verify.sh
    ;;
  *) echo "usage: $0 a|b|c" >&2; exit 2 ;;
esac
