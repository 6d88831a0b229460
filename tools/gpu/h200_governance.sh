#!/usr/bin/env bash
# Issue 15's batching figure on the NVIDIA host's GPU: tools/bench/governance_batching.py with the
# x86-nvidia profile (onnxruntime-gpu's CUDA EP), adaptive against every static batch at each load, one
# process per model (a model's table survives the other's timeout).
# One call, after the six calls that staged the onnxruntime-gpu parts in $HOME/stage (tools/gpu/h200_run.sh),
# carrying .gpu/wheels and .gpu/ort/ort.sha256:
#   bash tools/gpu/h200_governance.sh [arguments for governance_batching.py instead of the measured ones]
# The setup (venv, onnxruntime-gpu) is tools/gpu/suite.sh's; the tables and the JSON land in $OUT.
# docs/benchmarks.md ("Adaptive batching") has the H100 run of the defaults (about 4 minutes with the setup).
set -uo pipefail
OUT=${OUT:-/tmp/edge-sdk-out}
mkdir -p "$OUT"
OUT=$OUT bash tools/gpu/suite.sh setup > "$OUT/setup-governance.txt" 2>&1 || { tail -20 "$OUT/setup-governance.txt"; exit 1; }
grep -E "providers|onnxruntime " "$OUT/setup-governance.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
measured=(--session-per-size --max-batch 16 --statics 1,8,16 --delays-ms 0,2 --seconds 1.5 --loads 0.3,0.7,1.0,1.5)
[ $# -gt 0 ] && measured=("$@")
for model in cnn detector; do
  PYTHONPATH=$PWD timeout 250 "$HOME/venv/bin/python" tools/bench/governance_batching.py --profile x86-nvidia \
    --models "$model" --json "$OUT/governance_batching_$model.json" "${measured[@]}" 2>&1 \
    | grep -v "TensorrtExecutionProvider\|tensorrt cannot run" | tee "$OUT/governance_batching_$model.txt"
done
