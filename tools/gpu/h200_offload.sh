#!/usr/bin/env bash
# Issue 13's figure 2 on the NVIDIA host: tools/bench/offload.py with a Jetson-class edge (2 CPU cores,
# x86-cpu, pinned with taskset) and the worker on the GPU (x86-nvidia through onnxruntime-gpu, the other
# cores), broker and throttling proxy on the same host. One call per model, after the six calls that
# staged the onnxruntime-gpu parts in $HOME/stage (see tools/gpu/h200_run.sh), carrying .gpu/wheels,
# .gpu/mosquitto and .gpu/ort/ort.sha256:
#   bash tools/gpu/h200_offload.sh detector|resnet18|resnet50 [more arguments for offload.py]
# The setup (venv, onnxruntime-gpu, mosquitto) is tools/gpu/suite.sh's; logs and the JSON land in $OUT.
set -uo pipefail
model=${1:?usage: $0 detector|resnet18|resnet50 [offload.py arguments]}
shift
OUT=${OUT:-/tmp/edge-sdk-out}
mkdir -p "$OUT"
OUT=$OUT bash tools/gpu/suite.sh setup > "$OUT/setup-$model.txt" 2>&1 || { tail -20 "$OUT/setup-$model.txt"; exit 1; }
grep -E "providers|mosquitto:|onnxruntime " "$OUT/setup-$model.txt"
export PATH=$HOME/venv/bin:$HOME/mosquitto/bin:$PATH
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
PYTHONPATH=$PWD timeout 560 "$HOME/venv/bin/python" tools/bench/offload.py --model "$model" \
  --edge-cores 0,1 --edge-threads 2 --edge-profile x86-cpu \
  --worker-cores 2-15 --worker-threads 0 --worker-profile x86-nvidia \
  --keep "$OUT/run-$model" "$@" > "$OUT/offload-$model.txt" 2> "$OUT/offload-$model.log"
status=$?
cat "$OUT/offload-$model.txt"
tail -5 "$OUT/offload-$model.log"
# the kept folder holds every run's files; only the worker's log comes back (8 files at most)
cp "$OUT/run-$model/worker.log" "$OUT/worker-$model.log" 2>/dev/null
rm -rf "$OUT/run-$model"
exit $status
