#!/usr/bin/env bash
# A short lease (after ort.part00-04 are staged): the full detector's 8-camera pipeline at more layouts
# than h200_run.sh c tries. LAYOUTS, VARIANTS and RING_SLOTS come from the environment; SKIP_BASELINE=1
# leaves the plain loop out. Logs in $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/edge-sdk-out}
mkdir -p "$OUT" "$HOME/stage" && cp .gpu/ort/c5/* "$HOME/stage/"
bash tools/gpu/install_ort.sh || exit 1
export PYTHONPATH="$HOME/ortsite:$HOME/site:$PWD"
python3 tools/bench/gpu_pipeline.py --variants "${VARIANTS:-full}" --layouts "${LAYOUTS:-4x16,3x16,4x8}" --seconds 8 --warmup 2 \
  --ring-slots "${RING_SLOTS:-8}" ${SKIP_BASELINE:+--skip-baseline} --total-seconds 150 2>&1 | grep -v "^skipping Tensorrt" | tee "$OUT/gpu_layouts.log"
