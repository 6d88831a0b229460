#!/usr/bin/env bash
# A short second lease: after ort.part00-04 are staged, stage part 05, install, and re-run on the GPU
# what the first lease found wrong: the provider-option refusal (device_id 7), the tests that failed
# there only, and gate_check's bad-input step. Logs in $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/edge-sdk-out}
mkdir -p "$OUT" "$HOME/stage" && cp .gpu/ort/c5/* "$HOME/stage/"
SUITE_TIMEOUT=150 SUITE_TESTS="tests/engines/test_provider_refusal.py tests/engines/test_io_binding.py \
tests/graph/test_ssd_split.py tests/cli/test_cli.py tests/fleet/test_rollout_agent.py" bash tools/gpu/suite.sh
PYTHONPATH="$HOME/ortsite:$HOME/site:$PWD" timeout 90 python3 tools/gpu/gate_check.py 2>&1 | sed -n '/^3\./,$p'
