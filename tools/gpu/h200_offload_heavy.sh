#!/usr/bin/env bash
# Issue 13 on the NVIDIA host, where offloading should win: the ResNet-50-shaped model at 448 px (16 GFLOP a
# frame, tools/bench/offload_bed.py) on a Jetson-class edge (2 CPU cores, x86-cpu, taskset) against the GPU
# worker (x86-nvidia, onnxruntime-gpu). After the six calls that staged the onnxruntime-gpu parts in
# $HOME/stage, each call carrying .gpu/wheels, .gpu/mosquitto and .gpu/ort/ort.sha256:
#   bash tools/gpu/h200_offload_heavy.sh plan           ResNet-50 (224 px) timed on the edge's cores, the
#                                                      reference of tools/bench/orin_projection.py; then
#                                                      `edge-sdk offload plan` of the 448 px pipeline
#   bash tools/gpu/h200_offload_heavy.sh bench [args]  tools/bench/offload.py --model resnet50 (h200_offload.sh)
# Logs, the plan's JSON and the bench's output land in $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/edge-sdk-out}
mkdir -p "$OUT"
stage=${1:?usage: $0 plan|bench [offload.py arguments]}
shift
case "$stage" in
  plan)
    OUT=$OUT bash tools/gpu/suite.sh setup > "$OUT/setup-plan.txt" 2>&1 || { tail -20 "$OUT/setup-plan.txt"; exit 1; }
    grep -E "providers|onnxruntime " "$OUT/setup-plan.txt"
    export PATH=$HOME/venv/bin:$PATH PYTHONPATH=$PWD
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    lscpu | grep -E "Model name|^CPU\(s\)"
    taskset -c 0,1 timeout 120 python tools/bench/orin_projection.py reference --threads 2 | tee "$OUT/reference.txt"
    folder=$(mktemp -d)
    python - "$folder" <<'PY'
import sys
from pathlib import Path
from tools.bench.offload_bed import demo_pipeline, write_yaml
folder = Path(sys.argv[1])
write_yaml(folder / "resnet50.yaml", demo_pipeline(15.0, None, None, "resnet50", folder))
PY
    # the edge's rows on its two cores; the cloud's on the GPU (its host work on the same two cores)
    taskset -c 0,1 timeout 300 edge-sdk --cache-dir "$folder/engines" offload plan "$folder/resnet50.yaml" \
      --edge-profile x86-cpu --cloud-profile x86-nvidia --threads 2 --frames 8 --rtt-ms 20 \
      --bandwidths 1,5,20,100 --out "$OUT/plan-resnet50.json" 2>&1 | tee "$OUT/plan-resnet50.txt"
    ;;
  bench)
    bash tools/gpu/h200_offload.sh resnet50 "$@"
    ;;
  *) echo "usage: $0 plan|bench [offload.py arguments]" >&2; exit 2 ;;
esac
