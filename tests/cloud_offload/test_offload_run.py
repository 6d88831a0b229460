"""`edge-sdk run` of a pipeline with an `offload:` section, in the multi-process runtime, against a
worker process: one SIGKILLed mid-stream (every frame still gets exactly one result), one serving
escalations (the edge result first, the cloud's update after it, in the sinks' files), and a live
camera faster than the edge (throughput mode: the frames sent away reach the sinks, in order)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from edge_sdk.engines.cache import EngineCache
from edge_sdk.mqtt import MqttClient
from edge_sdk.pipeline.config import PipelineConfig
from edge_sdk.pipeline.engine_setup import prepare_models
from edge_sdk.profiles import DeviceProfile
from tests.support.clients import Inbox
from tests.support.waits import wait_until
from tools.harness.broker import BrokerFactory, MosquittoBroker
from tools.harness.throttle_proxy import LinkShape, ThrottlingProxy

pytestmark = pytest.mark.slow

FRAMES = 300
REPO_ROOT = Path(__file__).resolve().parents[2]
ASTRONAUT = REPO_ROOT / "tools" / "assets" / "astronaut.jpg"


EDGE_SDK = [str(Path(sys.executable).parent / "edge-sdk")]


@dataclass
class Bed:
    folder: Path
    served: dict[str, Any]
    """The detector the worker serves, with a synthetic source; the edge's pipeline starts from it."""
    env: dict[str, str]


def serving_worker(
    broker: MosquittoBroker, folder: Path, demo_model: Path, profile: DeviceProfile, name: str, source: str
) -> Bed:
    """broker.yaml, `name`.yaml (the detector) with its engine built once for both sides."""
    (folder / "broker.yaml").write_text(yaml.safe_dump({"host": broker.host, "port": broker.port}))
    served = {
        "name": name,
        "model": {"path": str(demo_model)},
        "preprocess": {"resize": [300, 300], "color": "rgb", "layout": "nhwc", "dtype": "uint8"},
        "sources": [{"uri": source, "name": "cam"}],
        "postprocess": {"type": "ssd", "labels": ["person"]},
    }
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(served))
    cache = EngineCache(folder / "engines")
    prepare_models(PipelineConfig.model_validate(served), profile, cache)  # built once, loaded by both
    return Bed(folder, served, {**os.environ, "EDGE_SDK_CACHE_DIR": str(cache.root)})


@contextlib.contextmanager
def worker_of(bed: Bed) -> Iterator[subprocess.Popen[str]]:
    """`edge-sdk offload worker` serving the bed's detector, ready; stopped (or found dead) on exit."""
    worker = subprocess.Popen(
        [*EDGE_SDK, "offload", "worker", "--broker", "broker.yaml", "--pipeline", f"{bed.served['name']}.yaml",
         "--id", "w1"],
        cwd=bed.folder, env=bed.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        wait_until(lambda: worker.poll() is not None or _ready(worker), 60, "the worker to be ready")
        yield worker
    finally:
        if worker.poll() is None:
            worker.terminate()
        worker.wait(timeout=30)


def write_pipeline(bed: Bed, pipeline: dict[str, Any]) -> None:
    (bed.folder / "pipeline.yaml").write_text(yaml.safe_dump({**bed.served, **pipeline}))


def test_a_worker_killed_mid_stream_loses_no_frame(
    start_broker: BrokerFactory, tmp_path: Path, demo_model: Path, cpu_profile: DeviceProfile
) -> None:
    broker = start_broker()
    bed = serving_worker(
        broker, tmp_path, demo_model, cpu_profile, "detector", f"synthetic://?frames={FRAMES}&size=320x240"
    )
    write_pipeline(
        bed,
        {
            "sinks": [{"type": "jsonl", "path": "results.jsonl"}],
            "offload": {"broker": "broker.yaml", "device": "cam1", "modes": ["edge", "cloud"], "fixed": "cloud",
                        "deadline_ms": 400},
        },
    )  # fmt: skip
    with worker_of(bed) as worker:
        run = subprocess.Popen(
            [*EDGE_SDK, "run", "pipeline.yaml"], cwd=tmp_path, env=bed.env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        results = tmp_path / "results.jsonl"
        counters = Inbox()  # the agents' offload counters, about every second
        with MqttClient(broker.settings(client_id="watcher")) as watcher:
            watcher.subscribe("edge/cam1/telemetry/offload", counters)
            if not _poll(lambda: _offloaded(counters) >= 20 or run.poll() is not None, 60):
                run.kill()
                pytest.fail(f"no 20 frames offloaded: {run.communicate()[0]}")
        worker.send_signal(signal.SIGKILL)
        output, _ = run.communicate(timeout=60)
        assert run.returncode == 0, output
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert sorted(row["frame"] for row in rows) == list(range(FRAMES)), "every frame once, none lost"
    where = [row["computed_at"] for row in sorted(rows, key=lambda row: row["frame"])]
    assert where.count("cloud") >= 20, where
    assert where[-20:] == ["edge"] * 20, where


def test_a_live_camera_faster_than_the_edge_gets_the_frames_sent_away_into_the_sinks_in_order(
    start_broker: BrokerFactory, tmp_path: Path, demo_model: Path, cpu_profile: DeviceProfile
) -> None:
    # given an 80 FPS camera (the detector takes 20 ms or more here) and a 100 ms round trip to the worker,
    # so the decision keeps frames on the edge and throughput mode sends the share it cannot keep pace with
    broker = start_broker()
    source = "synthetic://?frames=800&size=320x240&fps=80&realtime=true"
    bed = serving_worker(broker, tmp_path, demo_model, cpu_profile, "detector", source)
    with ThrottlingProxy((broker.host, broker.port), LinkShape(100e6, delay_s=0.05)) as proxy:
        (tmp_path / "edge-broker.yaml").write_text(yaml.safe_dump({"host": "127.0.0.1", "port": proxy.port}))
        write_pipeline(
            bed,
            {
                "runtime": {"mode": "processes", "inference_workers": 1, "inference_threads": 1},
                "sinks": [{"type": "jsonl", "path": "results.jsonl"}],
                "offload": {"broker": "edge-broker.yaml", "device": "cam1", "modes": ["edge", "cloud"],
                            "deadline_ms": 1000},
            },
        )  # fmt: skip
        with worker_of(bed):
            # when it runs to the end of the camera's 800 frames (10 s)
            run = subprocess.run(
                [*EDGE_SDK, "run", "--json", "pipeline.yaml"], cwd=tmp_path, env=bed.env, capture_output=True,
                text=True, timeout=120,
            )  # fmt: skip
    assert run.returncode == 0, run.stderr
    # then results computed in the cloud reach the sink beside the edge's, each frame once, in frame order:
    # none is dropped for coming back after newer frames computed here
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    frames = [row["frame"] for row in rows]
    where = [row["computed_at"] for row in rows]
    assert frames == sorted(set(frames)), "each frame once, in order"
    assert where.count("cloud") >= 10 and where.count("edge") >= 10, where
    assert "throughput:" in run.stderr, run.stderr
    assert json.loads(run.stdout)["frames"] == len(rows)


ESCALATED_FRAMES = 12


@pytest.mark.parametrize("runtime", ["processes", "inline"])
def test_escalation_in_either_runtime_writes_each_edge_result_then_its_cloud_update(
    start_broker: BrokerFactory, tmp_path: Path, demo_model: Path, cpu_profile: DeviceProfile, runtime: str
) -> None:
    # given a worker serving the escalation pipeline (the same detector: every box scores under 0.99)
    source = f"synthetic://?image={ASTRONAUT}&frames={ESCALATED_FRAMES}&size=320x240"
    bed = serving_worker(start_broker(), tmp_path, demo_model, cpu_profile, "bigger", source)
    write_pipeline(
        bed,
        {
            "name": "escalating",
            "runtime": {"mode": runtime},
            "sinks": [{"type": "jsonl", "path": "results.jsonl"}],
            # a deadline long enough that no escalation expires on a loaded machine (the suite's workers)
            "offload": {"broker": "broker.yaml", "device": "cam1", "modes": ["edge", "escalate"], "deadline_ms": 5000,
                        "escalate": {"pipeline": "bigger.yaml", "threshold": 0.99}},
        },
    )  # fmt: skip
    with worker_of(bed):
        # when the pipeline runs to the end of its source
        run = subprocess.run(
            [*EDGE_SDK, "run", "pipeline.yaml"], cwd=tmp_path, env=bed.env, capture_output=True, text=True, timeout=120
        )
    assert run.returncode == 0, run.stderr
    # then every frame has one edge result, and then its refined update from the cloud, marked as one
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    finals = [(row["frame"], row["computed_at"]) for row in rows if not row.get("update")]
    updates = [(row["frame"], row["computed_at"]) for row in rows if row.get("update")]
    assert finals == [(frame, "edge") for frame in range(ESCALATED_FRAMES)]
    assert sorted(updates) == [(frame, "cloud") for frame in range(ESCALATED_FRAMES)], "every unsure frame refined"
    for frame in range(ESCALATED_FRAMES):
        assert rows.index(next(r for r in rows if r["frame"] == frame and not r.get("update"))) < rows.index(
            next(r for r in rows if r["frame"] == frame and r.get("update"))
        ), "the edge result first"
    assert all(row["detections"] for row in rows), "the astronaut is found by both"


def _offloaded(counters: Inbox) -> int:
    return max((json.loads(m.payload).get("computed", {}).get("cloud", 0) for m in counters.messages), default=0)


def _poll(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False


def _ready(worker: subprocess.Popen[str]) -> bool:
    assert worker.stdout is not None
    line = worker.stdout.readline()
    return "ready on" in line
