#!/usr/bin/env bash
# CPU figures on the NVIDIA host, whose 16 cores (with VNNI) are quieter than the 2-core development
# box: start-up against a plain script (tools/bench/startup.py), then INT8 against FP32 on the shipped
# detector (tools/bench/int8_detector.py). One call, carrying .gpu/wheels (tools/gpu/suite.sh prepare
# wheels); the host's CPU onnxruntime runs everything. Logs land in $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/edge-sdk-out}
mkdir -p "$OUT"
# suite.sh makes $HOME/venv with the SDK's requirements and its edge-sdk console script; one quick test
# file checks the set-up
SUITE_TESTS=tests/test_layers.py SUITE_TIMEOUT=120 bash tools/gpu/suite.sh > "$OUT/setup.log" 2>&1
tail -5 "$OUT/setup.log"
py=$HOME/venv/bin/python
lscpu | grep -E "Model name|^CPU\(s\)|Flags" | sed 's/Flags:.*\(avx512_vnni\).*/VNNI: \1/' | tee "$OUT/cpu.txt"
"$py" tools/make_demo_video.py build/demo/demo.mp4 > /dev/null || exit 1
timeout 200 "$py" tools/bench/startup.py --rounds "${STARTUP_ROUNDS:-5}" 2>&1 | tee "$OUT/startup.txt"
timeout 300 "$py" tools/bench/int8_detector.py ${INT8_ARGS:-} 2>&1 | tee "$OUT/int8.txt"
