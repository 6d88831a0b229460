#!/usr/bin/env bash
# Issue 15's batching figure on the NVIDIA host's GPU: tools/bench/governance_batching.py with the
# x86-nvidia profile (onnxruntime-gpu's CUDA EP), adaptive against every static batch at each load.
# One call, after the six calls that staged the onnxruntime-gpu parts in $HOME/stage (tools/gpu/h200_run.sh),
# carrying .gpu/wheels and .gpu/ort/ort.sha256:
#   bash tools/gpu/h200_governance.sh [more arguments for governance_batching.py]
# The setup (venv, onnxruntime-gpu) is tools/gpu/suite.sh's; the table and the JSON land in $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/edge-sdk-out}
mkdir -p "$OUT"
OUT=$OUT bash tools/gpu/suite.sh setup > "$OUT/setup-governance.txt" 2>&1 || { tail -20 "$OUT/setup-governance.txt"; exit 1; }
grep -E "providers|onnxruntime " "$OUT/setup-governance.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
PYTHONPATH=$PWD timeout 540 "$HOME/venv/bin/python" tools/bench/governance_batching.py --profile x86-nvidia \
  --json "$OUT/governance_batching.json" "$@" 2>&1 | tee "$OUT/governance_batching.txt"
