#!/usr/bin/env bash
# A short second lease: after ort.part00-04 are staged, stage part 05, install, and re-run on the GPU
# what the first lease found wrong: the provider-option refusal (device_id 7, a gpu-marked test) and
# the tests that failed there only. Logs in $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/edge-sdk-out}
mkdir -p "$OUT" "$HOME/stage" && cp .gpu/ort/c5/* "$HOME/stage/"
SUITE_TIMEOUT=150 SUITE_TESTS="tests/backends/test_provider_refusal.py tests/backends/test_io_binding.py \
tests/graph/test_ssd_split.py tests/cli/test_cli.py tests/fleet/test_rollout_agent.py" bash tools/gpu/suite.sh
