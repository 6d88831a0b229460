#!/usr/bin/env bash
# On the NVIDIA host (the device tool), after the onnxruntime-gpu parts were staged in $HOME/stage
# (DEVELOPERS notes: ../shared/tools/prepare-gpu-wheels.sh): install them (install_ort.sh), then check
# what the host offers: which listed providers load, doctor, the folded preprocessing on the CUDA EP
# against the CPU, the demo pipeline on x86-cpu and x86-nvidia, the equivalence gate on the CUDA EP
# (tools/gpu/gate_check.py). The tests, hardware-marked ones included, are tools/gpu/suite.sh's: it runs
# them with the `edge-sdk` launcher some of them call. Everything this prints also lands in $OUT/log.txt.
set -uo pipefail
OUT=${OUT:-/tmp/edge-sdk-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
bash tools/gpu/install_ort.sh || exit 1
export PYTHONPATH="$HOME/ortsite:$HOME/site:$PWD"
nvidia-smi -L
python3 -c "import onnxruntime as o; print('onnxruntime', o.__version__, o.get_available_providers())"
python3 -m edge_sdk.backends.onnxruntime.providers
python3 -m edge_sdk.cli.main doctor
python3 tools/gpu/fold_check.py
python3 tools/make_demo_video.py build/demo/demo.mp4
export EDGE_SDK_CACHE_DIR="$HOME/engine-cache"
for profile in x86-cpu x86-nvidia; do
  python3 -m edge_sdk.cli.main run pipelines/demo.yaml --profile "$profile" --json > "$OUT/run-$profile.json" 2> "$OUT/run-$profile.err"
  echo "run --profile $profile: exit $?, $(grep -o '"frames": [0-9]*' "$OUT/run-$profile.json")"
  echo "  EP Error dumps: $(grep -c 'EP Error\|Failed to load library' "$OUT/run-$profile.err"); warnings:"; grep -i "warning" "$OUT/run-$profile.err" | head -3
  cp build/demo/results.jsonl "$OUT/results-$profile.jsonl"
done
python3 - "$OUT" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
def load(profile):
    return {r["frame"]: r["detections"] for r in map(json.loads, (out / f"results-{profile}.jsonl").read_text().splitlines())}
cpu, gpu = load("x86-cpu"), load("x86-nvidia")
def iou(a, b):
    x1, y1, x2, y2 = max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3])
    inter = max(0, x2 - x1) * max(0, y2 - y1)
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)
n_cpu, n_gpu = sum(map(len, cpu.values())), sum(map(len, gpu.values()))
matched = sum(1 for f, dets in cpu.items() for d in dets if any(iou(d["box"], g["box"]) >= 0.9 for g in gpu.get(f, [])))
print(f"demo detections: x86-cpu {n_cpu}, x86-nvidia {n_gpu} ({100 * (n_gpu - n_cpu) / max(n_cpu, 1):+.1f}%); "
      f"CPU boxes matched on the GPU at IoU >= 0.9: {matched}/{n_cpu}")
PY
COLUMNS=200 python3 -m edge_sdk.cli.main cache ls
python3 -m edge_sdk.cli.main compare models/ssdlite_mobilenet_v2_person.onnx \
  models/ssdlite_mobilenet_v2_person.onnx@x86-nvidia:fp16 --data tools/assets --pipeline pipelines/demo.yaml --max-drop 5
python3 tools/gpu/gate_check.py
