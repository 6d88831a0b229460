"""A pipeline on a real RTSP stream keeps producing results when the server dies and comes back."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from edge_sdk.core.status import StatusEvent, StatusKind
from edge_sdk.engines.cache import EngineCache
from edge_sdk.pipeline.config import load_pipeline
from edge_sdk.pipeline.metrics import RunSummary
from edge_sdk.pipeline.run import run_pipeline
from edge_sdk.profiles import DeviceProfile
from tests.support.waits import wait_until

from ..sources.conftest import rtsp_server  # noqa: F401 - the fixture, shared with the source tests
from ..sources.rtsp_server import RtspServer


def _result_count(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_pipeline_when_the_rtsp_server_restarts_reconnects_and_keeps_producing_results(
    tmp_path: Path,
    rtsp_server: RtspServer,  # noqa: F811
    demo_model: Path,
    cpu_profile: DeviceProfile,
    engine_cache: EngineCache,
) -> None:
    # given a detector pipeline reading the live stream
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(
        f"name: rtsp\nmodel: {{path: {demo_model}}}\n"
        f"sources:\n  - uri: '{rtsp_server.url('transport=udp&open_timeout_ms=3000&read_timeout_ms=2000')}'\n"
        "    name: door\n    reconnect: {initial_delay: 0.2, max_delay: 1.0}\n"
        "postprocess: {type: ssd, labels: [person]}\n"
        "sinks: [{type: jsonl, path: out/results.jsonl}]\nruntime: {stats_interval_s: 0.2}\n"
    )
    results = tmp_path / "out" / "results.jsonl"
    events: list[StatusEvent] = []
    stop = threading.Event()
    summaries: list[RunSummary] = []
    runner = threading.Thread(
        target=lambda: summaries.append(
            run_pipeline(load_pipeline(pipeline), cpu_profile, engine_cache, stop=stop, on_status=events.append)
        )
    )
    runner.start()
    try:
        wait_until(lambda: _result_count(results) >= 5, 60, "results from the live stream")
        # when the server dies mid-stream and comes back
        rtsp_server.kill()
        wait_until(lambda: any(e.kind == StatusKind.SOURCE_LOST for e in events), 30, "the source to be reported lost")
        before_restart = _result_count(results)
        rtsp_server.restart()
        # then the pipeline reconnects and results keep coming
        wait_until(lambda: _result_count(results) >= before_restart + 5, 60, "results after the restart")
    finally:
        stop.set()
        runner.join(timeout=60)
    kinds = [e.kind for e in events if e.subject.startswith("door") or "door" in e.subject]
    assert StatusKind.SOURCE_LOST in kinds and StatusKind.SOURCE_RECONNECTED in kinds, (
        f"the loss and the reconnection are reported as status events, got {kinds}"
    )
    assert kinds.index(StatusKind.SOURCE_RECONNECTED) > kinds.index(StatusKind.SOURCE_LOST)
    frames = [json.loads(line)["frame"] for line in results.read_text().splitlines()]
    assert frames == sorted(frames) and len(set(frames)) == len(frames), "frame indexes keep increasing across it"
    assert summaries and summaries[0].frames == len(frames)
