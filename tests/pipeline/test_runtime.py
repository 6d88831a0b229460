"""The multi-process runtime: real stage processes, shared-memory rings, the watchdog, clean shutdown."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest

from edge_sdk.core.errors import EdgeSDKError
from edge_sdk.core.opencv import import_cv2
from edge_sdk.core.status import StatusEvent, StatusKind
from edge_sdk.engines.cache import EngineCache
from edge_sdk.pipeline.config import PipelineConfig, load_pipeline
from edge_sdk.pipeline.frame_ring import remove_stale_segments, segments_of
from edge_sdk.pipeline.run import run_pipeline
from edge_sdk.pipeline.snapshot import RuntimeSnapshot
from edge_sdk.profiles import DeviceProfile, ProfileCatalog
from tests.support.waits import poll_until, wait_until
from tools.harness.chaos import stage_processes

from ..conftest import ASTRONAUT
from .crashing_sinks import CRASH_MARKER_ENV

pytestmark = pytest.mark.slow  # multi-process runs or subprocesses: not in make test-fast

EDGE_SDK = str(Path(sys.executable).with_name("edge-sdk"))


def write_pipeline(folder: Path, body: str) -> PipelineConfig:
    path = folder / "pipeline.yaml"
    path.write_text(body)
    return load_pipeline(path)


def detector_pipeline(
    folder: Path, demo_model: Path, sources: str, runtime: str = "", sinks: str = ""
) -> PipelineConfig:
    return write_pipeline(
        folder,
        f"name: rt\nmodel: {{path: {demo_model}}}\n"
        f"sources:\n{sources}"
        "postprocess: {type: ssd, labels: [person]}\n"
        f"sinks:\n  - {{type: jsonl, path: out/results.jsonl}}\n{sinks}"
        f"runtime:\n  stats_interval_s: 0.2\n{runtime}",
    )


def read_jsonl(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_runtime_when_reading_a_file_delivers_every_frame_in_order_and_leaves_no_shared_memory(
    tmp_path: Path, demo_model: Path, small_video: Path, cpu_profile: DeviceProfile, engine_cache: EngineCache
) -> None:
    # given a file source (block policy) and an annotated video sink
    config = detector_pipeline(
        tmp_path, demo_model, f"  - {{uri: {small_video}, name: cam}}\n", sinks="  - {type: video, path: out/a.mp4}\n"
    )
    # when
    summary = run_pipeline(config, cpu_profile, engine_cache)
    # then
    results = read_jsonl(tmp_path / "out" / "results.jsonl")
    assert [r["frame"] for r in results] == list(range(24)), "a file loses no frame and keeps its order"
    assert summary.frames == 24 and summary.dropped == {"cam": 0}
    assert sum(1 for r in results if r["detections"]) >= 20, "the detector still finds the astronaut"
    capture = import_cv2().VideoCapture(str(tmp_path / "out" / "a.mp4"))
    assert int(capture.get(import_cv2().CAP_PROP_FRAME_COUNT)) == 24, "the annotated video has every frame"
    assert segments_of(os.getpid()) == [], "no shared-memory segment outlives the pipeline"


def test_runtime_when_two_workers_and_batches_serve_two_sources_keeps_each_source_complete_and_ordered(
    tmp_path: Path, demo_model: Path, small_video: Path, cpu_profile: DeviceProfile, engine_cache: EngineCache
) -> None:
    # given two sources, two inference workers with one thread each, batches of up to 4 frames
    sources = f"  - {{uri: {small_video}, name: a}}\n  - {{uri: '{small_video}', name: b, max_frames: 10}}\n"
    runtime = "  inference_workers: 2\n  inference_threads: 1\n  batch_size: 4\n  batch_timeout_ms: 20\n"
    config = detector_pipeline(tmp_path, demo_model, sources, runtime)
    # when
    summary = run_pipeline(config, cpu_profile, engine_cache)
    # then
    results = read_jsonl(tmp_path / "out" / "results.jsonl")
    by_source = {name: [r["frame"] for r in results if r["source"] == name] for name in ("a", "b")}
    assert by_source == {"a": list(range(24)), "b": list(range(10))}, "every frame of each source, in order"
    assert summary.mean_batch > 1.0, "frames from both sources share inference calls"


def test_runtime_when_a_live_source_outpaces_a_slow_sink_drops_old_frames_and_stays_current(
    tmp_path: Path, demo_model: Path, cpu_profile: DeviceProfile, engine_cache: EngineCache
) -> None:
    # given a 100 FPS live camera and a sink that needs 30 ms per frame
    uri = f"synthetic://?image={ASTRONAUT}&frames=150&size=320x240&fps=100&realtime=true"
    config = detector_pipeline(
        tmp_path,
        demo_model,
        f"  - {{uri: '{uri}', name: live}}\n",
        runtime="  ring_slots: 4\n",
        sinks="  - {type: callable, function: 'tests.pipeline.crashing_sinks:sleep_30ms'}\n",
    )
    # when
    summary = run_pipeline(config, cpu_profile, engine_cache)
    # then
    frames = [r["frame"] for r in read_jsonl(tmp_path / "out" / "results.jsonl")]
    assert summary.dropped["live"] > 0, "a slow consumer makes the live source drop frames, and they are counted"
    assert len(frames) + summary.dropped["live"] == 150, "every frame is either delivered or counted as dropped"
    assert frames == sorted(set(frames)), "results never go back in time"
    # The sink keeps up with about a third of the camera; dropping the oldest waiting frame keeps
    # making room for new ones, so the results stay with the camera to its last frames.
    assert frames[-1] >= 135, f"the results follow the camera to its end (last delivered frame: {frames[-1]})"


def test_runtime_when_a_file_feeds_a_slow_sink_applies_back_pressure_and_drops_nothing(
    tmp_path: Path, demo_model: Path, small_video: Path, cpu_profile: DeviceProfile, engine_cache: EngineCache
) -> None:
    # given a file (block policy), a ring of 3 slots and a sink that needs 30 ms per frame
    config = detector_pipeline(
        tmp_path,
        demo_model,
        f"  - {{uri: {small_video}, name: cam}}\n",
        runtime="  ring_slots: 3\n",
        sinks="  - {type: callable, function: 'tests.pipeline.crashing_sinks:sleep_30ms'}\n",
    )
    # when
    summary = run_pipeline(config, cpu_profile, engine_cache)
    # then
    frames = [r["frame"] for r in read_jsonl(tmp_path / "out" / "results.jsonl")]
    assert frames == list(range(24)), "a slow consumer slows a file down instead of losing frames"
    assert summary.dropped == {"cam": 0}


def test_runtime_when_the_output_stage_crashes_restarts_it_and_finishes(
    tmp_path: Path,
    demo_model: Path,
    small_video: Path,
    cpu_profile: DeviceProfile,
    engine_cache: EngineCache,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given a sink that kills its process at frame 5, once
    monkeypatch.setenv(CRASH_MARKER_ENV, str(tmp_path / "crashed"))
    config = detector_pipeline(
        tmp_path,
        demo_model,
        f"  - {{uri: {small_video}, name: cam}}\n",
        sinks="  - {type: callable, function: 'tests.pipeline.crashing_sinks:crash_once_at_frame_5'}\n",
    )
    events: list[StatusEvent] = []
    # when
    summary = run_pipeline(config, cpu_profile, engine_cache, on_status=events.append)
    # then
    restarts = [e for e in events if e.kind == StatusKind.STAGE_RESTARTED]
    assert [e.subject for e in restarts] == ["output"], "the watchdog restarts the crashed stage and says so"
    assert summary.restarts == {"output": 1}
    frames = [r["frame"] for r in read_jsonl(tmp_path / "out" / "results.jsonl")]
    assert frames[:5] == [0, 1, 2, 3, 4], "results written before the crash are kept"
    assert frames[-1] == 23, "the pipeline carries on to the end of the file after the restart"
    # frame 5 reached the JSONL sink but not the sink that crashed on it, so it may not count as delivered
    assert len(frames) - 1 <= summary.frames <= len(frames), "the summary counts the frames of both output processes"
    assert segments_of(os.getpid()) == []


def test_runtime_when_a_stage_keeps_crashing_stops_with_a_clear_error_and_cleans_up(
    tmp_path: Path, demo_model: Path, small_video: Path, cpu_profile: DeviceProfile, engine_cache: EngineCache
) -> None:
    # given a sink that kills its process on every frame, and a budget of one restart
    config = detector_pipeline(
        tmp_path,
        demo_model,
        f"  - {{uri: {small_video}, name: cam}}\n",
        runtime="  max_restarts: 1\n",
        sinks="  - {type: callable, function: 'tests.pipeline.crashing_sinks:crash_always'}\n",
    )
    events: list[StatusEvent] = []
    # when
    with pytest.raises(EdgeSDKError) as raised:
        run_pipeline(config, cpu_profile, engine_cache, on_status=events.append)
    # then
    assert "stage output crashed (exit code 3)" in str(raised.value) and "max_restarts=1" in str(raised.value)
    assert [e.kind for e in events if e.subject == "output"][-1] == StatusKind.STAGE_FAILED
    assert segments_of(os.getpid()) == [], "shared memory is released even when the pipeline fails"


def test_runtime_when_an_inference_worker_is_killed_restarts_it_and_finishes(
    tmp_path: Path, demo_model: Path, small_video: Path, cpu_profile: DeviceProfile, engine_cache: EngineCache
) -> None:
    # given a long enough file and a snapshot callback that SIGKILLs the worker once it has done some frames
    config = detector_pipeline(
        tmp_path,
        demo_model,
        f"  - {{uri: {small_video}, name: cam, loop: true, max_frames: 150}}\n",
        runtime="  inference_workers: 1\n",
    )
    killed: list[int] = []

    def kill_worker(snapshot: RuntimeSnapshot) -> None:
        worker = next(s for s in snapshot.stages if s.name == "inference:0")
        if not killed and worker.frames >= 3 and worker.pid:
            killed.append(worker.pid)
            os.kill(worker.pid, signal.SIGKILL)

    # when
    summary = run_pipeline(config, cpu_profile, engine_cache, on_snapshot=kill_worker)
    # then
    assert killed, "the test must have killed the worker"
    assert summary.restarts == {"inference:0": 1}, "the watchdog replaces the killed worker"
    frames = [r["frame"] for r in read_jsonl(tmp_path / "out" / "results.jsonl")]
    assert frames[-1] == 149 and frames == sorted(frames), "the rest of the file is processed, in order"


def test_runtime_when_stop_is_set_drains_and_returns_a_summary(
    tmp_path: Path, demo_model: Path, cpu_profile: DeviceProfile, engine_cache: EngineCache
) -> None:
    # given an endless live source
    uri = f"synthetic://?image={ASTRONAUT}&frames=30&size=320x240&fps=30&realtime=true"
    config = detector_pipeline(tmp_path, demo_model, f"  - {{uri: '{uri}', name: live, loop: true}}\n")
    stop = threading.Event()
    # when stop is requested once results flow
    summary_box: list[object] = []
    runner = threading.Thread(
        target=lambda: summary_box.append(run_pipeline(config, cpu_profile, engine_cache, stop=stop))
    )
    runner.start()
    results = tmp_path / "out" / "results.jsonl"
    poll_until(lambda: results.exists() and len(results.read_text().splitlines()) >= 5, 60, interval=0.1)
    stop.set()
    runner.join(timeout=30)
    # then
    assert not runner.is_alive(), "the pipeline stops after stop is set"
    assert summary_box and summary_box[0].frames >= 5  # type: ignore[attr-defined]
    assert segments_of(os.getpid()) == []


def test_runtime_when_prometheus_is_enabled_serves_stage_metrics(
    tmp_path: Path, demo_model: Path, small_video: Path, cpu_profile: DeviceProfile, engine_cache: EngineCache
) -> None:
    # given a free port
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = detector_pipeline(
        tmp_path,
        demo_model,
        f"  - {{uri: {small_video}, name: cam, loop: true, max_frames: 200}}\n",
        runtime=f"  prometheus: {{port: {port}}}\n",
    )
    scraped: list[str] = []

    def scrape(snapshot: RuntimeSnapshot) -> None:
        if not scraped and any(s.frames for s in snapshot.stages if s.name == "output"):
            scraped.append(urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode())

    # when
    run_pipeline(config, cpu_profile, engine_cache, on_snapshot=scrape)
    # then
    assert scraped, "metrics were served while the pipeline ran"
    assert 'edge_sdk_stage_fps{stage="inference:0"}' in scraped[0]
    assert 'edge_sdk_ring_slots{source="cam",state="free"}' in scraped[0]


def _cli_run(pipeline: Path, cache: Path, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "EDGE_SDK_CACHE_DIR": str(cache)}
    return subprocess.Popen(
        [EDGE_SDK, "run", str(pipeline), "--profile", "x86-cpu", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=Path(__file__).resolve().parents[2],
        start_new_session=True,
    )


def _wait_for_results(path: Path, lines: int, timeout: float = 90) -> None:
    wait_until(
        lambda: path.exists() and len(path.read_text().splitlines()) >= lines,
        timeout,
        f"{lines} results in {path}",
        0.1,
    )


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_cli_run_when_interrupted_drains_and_exits_cleanly(
    tmp_path: Path, demo_model: Path, sig: signal.Signals
) -> None:
    # given an endless live pipeline running in the real CLI
    uri = f"synthetic://?image={ASTRONAUT}&frames=30&size=320x240&fps=30&realtime=true"
    detector_pipeline(tmp_path, demo_model, f"  - {{uri: '{uri}', name: live, loop: true}}\n")
    process = _cli_run(tmp_path / "pipeline.yaml", tmp_path / "cache", "--stats")
    _wait_for_results(tmp_path / "out" / "results.jsonl", 5)
    # when the whole process group gets the signal, as a terminal's Ctrl-C does
    os.killpg(process.pid, sig)
    stdout, stderr = process.communicate(timeout=60)
    # then
    assert process.returncode == 128 + sig, f"a stop by signal exits 128 + the signal, by convention: {stderr}"
    assert "Traceback" not in stderr, stderr
    assert "stopped on request" in stdout and "FPS" in stdout, stdout
    assert "inference:0" in stderr, "--stats showed the stage table"
    assert segments_of(process.pid) == [], "no shared memory is left behind"


def test_cli_run_when_the_parent_is_killed_children_exit_and_the_next_start_removes_its_segments(
    tmp_path: Path, demo_model: Path
) -> None:
    # given a running pipeline
    uri = f"synthetic://?image={ASTRONAUT}&frames=30&size=320x240&fps=30&realtime=true"
    detector_pipeline(tmp_path, demo_model, f"  - {{uri: '{uri}', name: live, loop: true}}\n")
    process = _cli_run(tmp_path / "pipeline.yaml", tmp_path / "cache")
    _wait_for_results(tmp_path / "out" / "results.jsonl", 5)
    children = [
        int(p) for p in subprocess.run(["pgrep", "-P", str(process.pid)], capture_output=True, text=True).stdout.split()
    ]
    children += list(stage_processes(process.pid))  # stages are the fork server's children
    assert len(stage_processes(process.pid)) >= 3, "capture, inference and output stages run"
    # when the parent is SIGKILLed
    process.kill()
    process.wait(timeout=10)
    # then its stage processes notice and exit
    poll_until(lambda: not any(_alive(pid) for pid in children), 20, interval=0.2)
    assert not any(_alive(pid) for pid in children), "orphaned stage processes must exit"
    # and whatever segment is left is removed by the next start's clean-up
    remove_stale_segments()
    assert segments_of(process.pid) == [], "a crashed pipeline's shared memory does not outlive the next start"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purpose
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_runtime_when_a_cascade_is_configured_classifies_each_detected_person(
    tmp_path: Path,
    demo_model: Path,
    small_video: Path,
    tiny_models: dict[str, Path],
    cpu_profile: DeviceProfile,
    engine_cache: EngineCache,
) -> None:
    # given the person detector and, on each person crop, the colour classifier (RGB means)
    config = detector_pipeline(
        tmp_path,
        demo_model,
        f"  - {{uri: {small_video}, name: cam, max_frames: 6}}\n",
        sinks="cascade:\n"
        f"  model: {tiny_models['uint8_mean_classifier']}\n"
        "  postprocess: {type: classification, output: scores, labels: [red, green, blue]}\n"
        "  labels: [person]\n",
    )
    # when
    run_pipeline(config, cpu_profile, engine_cache)
    # then
    detections = [d for r in read_jsonl(tmp_path / "out" / "results.jsonl") for d in r["detections"]]  # type: ignore[union-attr]
    assert detections, "the detector finds the astronaut"
    assert all(d["classifications"][0]["label"] in {"red", "green", "blue"} for d in detections), (
        "every person box carries the secondary model's class"
    )


@pytest.mark.broker
def test_runtime_when_an_mqtt_sink_is_configured_publishes_each_result_to_the_broker(
    tmp_path: Path, demo_model: Path, small_video: Path, cpu_profile: DeviceProfile, engine_cache: EngineCache
) -> None:
    from edge_sdk.mqtt.client import MqttClient
    from tests.support.clients import Inbox

    # given a private broker and a subscriber
    from tools.harness.broker import MosquittoBroker

    # given a private broker and a subscriber
    with MosquittoBroker(tmp_path / "broker") as broker:
        config = detector_pipeline(
            tmp_path,
            demo_model,
            f"  - {{uri: {small_video}, name: cam, max_frames: 8}}\n",
            sinks=f"  - {{type: mqtt, broker: {{host: 127.0.0.1, port: {broker.port}}}, "
            "topic: 'sites/{pipeline}/{source}', qos: 1, include_empty: true}\n",
        )
        inbox = Inbox()
        with MqttClient(broker.settings()) as subscriber:
            subscriber.subscribe("sites/#", inbox, qos=1)
            # when
            run_pipeline(config, cpu_profile, engine_cache)
            messages = inbox.wait_for(8, timeout=20)
    # then
    assert [m.topic for m in messages] == ["sites/rt/cam"] * 8, "one message per frame on the templated topic"
    assert [json.loads(m.payload)["frame"] for m in messages] == list(range(8))


def test_inference_layout_when_unset_uses_single_threaded_workers_per_core_on_cpu_and_one_on_accelerators(
    catalog: ProfileCatalog,
) -> None:
    from edge_sdk.pipeline.config import RuntimeSpec
    from edge_sdk.pipeline.worker_layout import inference_layout

    cores = min(os.cpu_count() or 1, 4)
    assert inference_layout(RuntimeSpec(), catalog.load("x86-cpu")) == (cores, 1 if cores > 1 else None)
    assert inference_layout(RuntimeSpec(), catalog.load("jetson-orin-dla")) == (1, None), "one worker owns the DLA"
    explicit = RuntimeSpec(inference_workers=3, inference_threads=2)
    assert inference_layout(explicit, catalog.load("x86-cpu")) == (3, 2), "the file's choice wins"
