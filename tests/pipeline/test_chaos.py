"""The runtime's promises under faults: stages SIGKILLed and signals at seeded random moments.

Each case prints its seed; `CHAOS_SEED=N pytest tests/pipeline/test_chaos.py` replays a failure.
tools/bench/chaos.py runs the same harness for minutes with random faults.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from tools.harness.chaos import Fault, file_pipeline, live_pipeline, run_with_fault

from ..sources.conftest import rtsp_server  # noqa: F401 - the fixture, shared with the source tests
from ..sources.rtsp_server import RtspServer

pytestmark = pytest.mark.slow  # multi-process runs or subprocesses: not in make test-fast

FRAMES = 60
BASE_SEED = int(os.environ.get("CHAOS_SEED", random.SystemRandom().randrange(1 << 30)))

FILE_FAULTS = [
    Fault("kill-output", "steady"),
    Fault("kill-infer", "steady"),
    Fault("kill-capture", "steady"),
    Fault("kill-output", "draining"),
    Fault("kill-output", "restarting"),
    Fault("sigterm-group", "steady"),
    Fault("sigint-parent", "starting"),
    Fault("sigterm-parent", "draining"),
]


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One engine cache for the module: the engine is built by the first run only."""
    return tmp_path_factory.mktemp("chaos-cache")


@pytest.mark.slow
@pytest.mark.parametrize("fault", FILE_FAULTS, ids=str)
def test_runtime_when_a_fault_hits_a_file_pipeline_loses_no_frame_and_leaves_nothing_behind(
    fault: Fault, tmp_path: Path, demo_model: Path, small_video: Path, shared_cache: Path
) -> None:
    # given a file source read to 60 frames by two workers
    seed = BASE_SEED + FILE_FAULTS.index(fault)
    print(f"chaos seed {seed} ({fault}); replay with CHAOS_SEED={BASE_SEED}")
    pipeline = file_pipeline(tmp_path, demo_model, small_video, FRAMES)
    # when the fault hits at its random moment
    outcome = run_with_fault(pipeline, shared_cache, fault, seed)
    # then: it ends, every frame is delivered once (or, after a stop, a gapless prefix), the summary
    # counts what the sink holds, and no process or /dev/shm entry is left
    problems = outcome.problems(FRAMES)
    assert not problems, f"seed {seed}: {problems}\n{outcome.stderr[-3000:]}"


@pytest.mark.slow
@pytest.mark.parametrize(
    "fault", [Fault("sigterm-group", "reconnecting"), Fault("kill-capture", "reconnecting")], ids=str
)
def test_runtime_when_a_fault_hits_a_reconnecting_live_source_stops_cleanly(
    fault: Fault,
    tmp_path: Path,
    demo_model: Path,
    shared_cache: Path,
    rtsp_server: RtspServer,  # noqa: F811
) -> None:
    # given a live RTSP source whose server dies, so the capture stage waits to reconnect
    seed = BASE_SEED + 100 + len(fault.action)
    print(f"chaos seed {seed} ({fault}); replay with CHAOS_SEED={BASE_SEED}")
    url = rtsp_server.url("transport=udp&open_timeout_ms=2000&read_timeout_ms=1000")
    pipeline = live_pipeline(tmp_path, demo_model, url)
    then_stop = fault.action == "kill-capture"  # a live source never ends: stop it after the kill
    outcome = run_with_fault(
        pipeline, shared_cache, fault, seed, live=True, lose_source=rtsp_server.kill, stop_after=then_stop
    )
    problems = outcome.problems(None)
    assert not problems, f"seed {seed}: {problems}\n{outcome.stderr[-3000:]}"
    assert outcome.summary is not None and "dropped" in outcome.summary, "live drops are counted and reported"
