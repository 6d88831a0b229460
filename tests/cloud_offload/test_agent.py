"""The edge agent against a real Mosquitto, real workers and a real slow link (the throttling proxy).

The edge here is made slow on purpose (its engine sleeps EDGE_MS a frame, a Jetson-class CPU beside
the worker's), so that offloading pays on a fast link as it would on a real edge box: on this
machine both ends are the same two cores, which the rest of the suite also keeps busy, and a busy
moment must not make the worker look slower than the edge.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from cloud_offload import protocol, tensor_codec
from cloud_offload.agent import OffloadDispatch
from cloud_offload.worker import OffloadWorker, WorkerSettings
from cloud_offload.worker_tails import SplitTails
from edge_sdk.core.preprocess import frame_feed
from edge_sdk.core.results import Frame, FrameMeta, Result
from edge_sdk.core.status import StatusEvent, StatusKind
from edge_sdk.engines.cache import EngineCache
from edge_sdk.engines.equivalence import scene_frames
from edge_sdk.mqtt import MqttClient
from edge_sdk.mqtt.messages import Message
from edge_sdk.pipeline.config import PipelineConfig
from edge_sdk.pipeline.engine_setup import prepare_models
from edge_sdk.pipeline.extensions import DispatchContext
from edge_sdk.pipeline.frame_steps import FrameInference
from edge_sdk.postprocess import build_postprocessor
from edge_sdk.profiles import DeviceProfile
from tests.support.waits import wait_until
from tools.harness.broker import BrokerFactory, MosquittoBroker
from tools.harness.throttle_proxy import LinkShape, ThrottlingProxy

pytestmark = pytest.mark.slow

DEVICE = "cam1"
EDGE_MS = 240.0
FPS = 15.0
DETECTOR = {
    "name": "detector",
    "preprocess": {"resize": [300, 300], "color": "rgb", "layout": "nhwc", "dtype": "uint8"},
    "sources": [{"uri": "synthetic://?frames=4&size=320x240", "name": "cam"}],
    "postprocess": {"type": "ssd", "labels": ["person"]},
}


class SlowEdge:
    """The pipeline's engine, `edge_ms` slower a frame: a weak edge box."""

    def __init__(self, runner: Any, edge_ms: float = EDGE_MS):
        self.runner, self.edge_ms = runner, edge_ms

    def __getattr__(self, name: str) -> Any:
        return getattr(self.runner, name)

    def infer(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        time.sleep(self.edge_ms / 1000)
        outputs: dict[str, np.ndarray] = self.runner.infer(feed)
        return outputs


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> EngineCache:
    return EngineCache(tmp_path_factory.mktemp("engines"))


@pytest.fixture(scope="module")
def detector(demo_model: Path) -> PipelineConfig:
    return PipelineConfig.model_validate({**DETECTOR, "model": {"path": str(demo_model)}})


@pytest.fixture
def broker(start_broker: BrokerFactory) -> MosquittoBroker:
    return start_broker()


@pytest.fixture
def worker(
    broker: MosquittoBroker, detector: PipelineConfig, cpu_profile: DeviceProfile, cache: EngineCache
) -> Iterator[OffloadWorker]:
    with OffloadWorker(
        [detector], cpu_profile, broker.settings(), WorkerSettings(worker_id="w1", report_interval_s=0.2), cache
    ) as running:
        yield running


@pytest.fixture
def proxy(broker: MosquittoBroker) -> Iterator[ThrottlingProxy]:
    with ThrottlingProxy((broker.host, broker.port), LinkShape(100e6, delay_s=0.005)) as running:
        yield running


Edge = Callable[..., OffloadDispatch]


@pytest.fixture
def edge(
    tmp_path: Path, proxy: ThrottlingProxy, detector: PipelineConfig, cpu_profile: DeviceProfile, cache: EngineCache
) -> Iterator[Edge]:
    opened: list[tuple[OffloadDispatch, Any]] = []

    def open_edge(
        events: list[StatusEvent] | None = None,
        port: int | None = None,
        live: bool = False,
        edge_ms: float = EDGE_MS,
        **offload: Any,
    ) -> OffloadDispatch:
        broker_file = tmp_path / "broker.yaml"
        broker_file.write_text(yaml.safe_dump({"host": "127.0.0.1", "port": port or proxy.port}))
        settings = {"broker": str(broker_file), "device": DEVICE, "modes": ["edge", "cloud"], **offload}
        config = PipelineConfig.model_validate(
            {**DETECTOR, "model": {"path": str(detector.model.path)}, "offload": settings}
        )
        models = prepare_models(config, cpu_profile, cache)
        runner = models.primary.open()
        runner.activate()
        local = FrameInference(
            SlowEdge(runner, edge_ms),  # type: ignore[arg-type]
            models.input_name,
            frame_feed(models.preprocess, models.engine_input),
            build_postprocessor(config.postprocess),
        )
        record = events.append if events is not None else (lambda event: None)
        context = DispatchContext(
            config, config.offload, cpu_profile, cache.root, local, 0, record, 1, LIVE if live else frozenset()
        )
        dispatch = OffloadDispatch(context)
        opened.append((dispatch, runner))
        wait_until(lambda: dispatch.link.connected and dispatch.link.workers(), 10, "the agent to see a worker")
        wait_until(lambda: dispatch.link.estimate().bandwidth_bps, 5, "the agent's first link estimate")
        return dispatch

    yield open_edge
    for dispatch, runner in opened:
        dispatch.close()
        runner.deactivate()


FRAMES = scene_frames(8)
LIVE = frozenset({"cam"})
"""The test camera as a live source, whose frames' numbers and times pace throughput mode: for
edge(live=True) with stream(live=True); other tests submit frames when the edge is ready, as a file."""


def stream(
    dispatch: OffloadDispatch, count: int, during: Callable[[int], None] = lambda index: None, live: bool = False
) -> list[tuple[FrameMeta, Result, float]]:
    """`count` frames at FPS, as a live camera gives them: each (meta, result, seconds from submit to result).
    With `live`, a frame is numbered as the camera numbered it when it is taken (a slow edge skips
    numbers: the frames a live source's ring dropped meanwhile); else the frames are 0..count-1."""
    submitted: dict[int, float] = {}
    results: list[tuple[FrameMeta, Result, float]] = []
    started, started_wall = time.monotonic(), time.time()

    def take(wait_s: float = 0.0) -> None:
        for meta, result in dispatch.collect(wait_s):
            if not result.update:
                results.append((meta, result, time.monotonic() - submitted[meta.index]))

    for step in range(count):
        during(step)
        index = max(step, int((time.monotonic() - started) * FPS), max(submitted, default=-1) + 1) if live else step
        image = FRAMES[index % len(FRAMES)]
        taken = started_wall + index / FPS if live else time.time()  # a live camera's capture time, else now
        frame = Frame(FrameMeta("cam", index, taken, image.shape[1], image.shape[0]), image)
        submitted[index] = time.monotonic()
        dispatch.submit([frame], [0.0])
        take()
        time.sleep(max(0.0, 1 / FPS - (time.monotonic() - submitted[index])))
    deadline = time.monotonic() + 10
    while len(results) < count and time.monotonic() < deadline:
        take(0.05)
    return results


def where(results: list[tuple[FrameMeta, Result, float]]) -> list[str | None]:
    return [result.computed_at for _meta, result, _seconds in results]


def exactly_once(results: list[tuple[FrameMeta, Result, float]], count: int) -> None:
    indices = sorted(meta.index for meta, _result, _seconds in results)
    assert indices == list(range(count)), f"frames lost or doubled: {indices}"


def test_an_edge_that_cannot_keep_pace_sends_the_share_it_cannot_compute_away(
    worker: OffloadWorker, edge: Edge, proxy: ThrottlingProxy
) -> None:
    # given a 200 ms round trip: the cloud is expected slower than the edge's 120 ms, so the decision keeps
    # frames here, while the camera brings one every 67 ms
    proxy.set(delay_s=0.1)
    events: list[StatusEvent] = []
    dispatch = edge(events, live=True, edge_ms=120.0)
    # when frames come live (numbers skip while the edge is busy)
    results = stream(dispatch, 60, live=True)
    # then each frame taken has one result, and about (120 - 67) / 120 of them went to the cloud
    indices = [meta.index for meta, _result, _seconds in results]
    assert len(indices) == 60 and len(set(indices)) == 60, indices
    assert dispatch.decision.mode == "edge", [e.message for e in events]
    away = where(results)[20:].count("cloud")
    assert 10 <= away <= 30, (where(results), dispatch.stats())
    said = [e for e in events if e.kind is StatusKind.OFFLOAD_THROUGHPUT]
    assert said and 0.25 < said[0].data["share"] < 0.7 and said[0].data["mode"] == "cloud", [e.message for e in said]
    assert "frames come every" in said[0].message
    assert 0.25 < dispatch.stats()["throughput_share"] < 0.7


def test_a_long_round_trip_still_carries_every_frame_at_the_cameras_pace(
    worker: OffloadWorker, edge: Edge, proxy: ThrottlingProxy
) -> None:
    # given a 200 ms round trip: three frames of a 15 FPS camera are on their way at any time
    proxy.set(delay_s=0.1)
    dispatch = edge(fixed="cloud")
    # when
    results = stream(dispatch, 30)
    # then the requests do not wait for each other's PUBACK: the cloud computes the frames within the deadline
    exactly_once(results, 30)
    assert where(results)[5:].count("cloud") >= 22, (where(results), dispatch.stats())
    assert dispatch.stats()["fallbacks"].get("deadline", 0) <= 2, dispatch.stats()


def test_throughput_mode_can_be_turned_off(worker: OffloadWorker, edge: Edge, proxy: ThrottlingProxy) -> None:
    proxy.set(delay_s=0.1)
    dispatch = edge(live=True, edge_ms=120.0, throughput=False)
    results = stream(dispatch, 20, live=True)
    assert set(where(results)) == {"edge"}


def test_a_fast_link_offloads_and_a_slow_one_keeps_frames_on_the_edge(
    worker: OffloadWorker, edge: Edge, proxy: ThrottlingProxy
) -> None:
    events: list[StatusEvent] = []
    dispatch = edge(events)
    fast = stream(dispatch, 40)
    exactly_once(fast, 40)
    assert where(fast)[-15:].count("cloud") >= 14, (where(fast), dispatch.stats(), [e.message for e in events])
    # the cloud finds what the edge finds on the same frames (the same model, a JPEG in between)
    cloud = sum(len(result.detections) for _meta, result, _s in fast[-8:] if result.computed_at == "cloud")
    here = sum(
        len(dispatch.local([Frame(meta, FRAMES[meta.index % len(FRAMES)])])[0].detections)
        for meta, result, _s in fast[-8:]
        if result.computed_at == "cloud"
    )
    assert here > 0 and abs(cloud - here) <= 1, (cloud, here)

    proxy.set(bandwidth_bps=0.5e6)  # a 25 KB JPEG now takes 400 ms, the edge 280
    changed = time.monotonic()
    slow = stream(dispatch, 40)
    exactly_once(slow, 40)
    assert where(slow)[-15:] == ["edge"] * 15, where(slow)
    switches = [e for e in events if e.kind is StatusKind.OFFLOAD_MODE]
    assert [e.data["mode"] for e in switches][:2] == ["cloud", "edge"], [e.message for e in switches]
    assert switches[1].timestamp - (time.time() - (time.monotonic() - changed)) < 2.5, "adapted within ~2 s"

    proxy.set(bandwidth_bps=100e6)  # back up: only the idle probes can see it, every frame stays here
    changed = time.monotonic()
    again = stream(dispatch, 25)
    exactly_once(again, 25)
    switches = [e for e in events if e.kind is StatusKind.OFFLOAD_MODE]
    assert [e.data["mode"] for e in switches][2:3] == ["cloud"], [e.message for e in switches]
    assert switches[2].timestamp - (time.time() - (time.monotonic() - changed)) < 2.5, "seen within ~2 s"
    assert dispatch.stats()["unknown_answers"] == 0


def test_a_cut_link_makes_every_frame_fall_back_within_its_deadline(
    worker: OffloadWorker, edge: Edge, proxy: ThrottlingProxy
) -> None:
    dispatch = edge(deadline_ms=400)
    cut_at: list[int] = []
    away: list[int] = []

    def fail(index: int) -> None:  # once frames are away: bytes held first, then the link goes
        if not cut_at and index >= 20 and dispatch.stats()["away"] > 0:
            proxy.stall()
            cut_at.append(index)
        elif cut_at and index == cut_at[0] + 2:
            away.append(dispatch.stats()["away"])
            proxy.cut()

    results = stream(dispatch, 80, during=fail)
    exactly_once(results, 80)
    assert cut_at and cut_at[0] < 60, ("never offloading before the cut", " ".join(map(str, where(results))))
    after = cut_at[0] + 5
    assert where(results)[after:] == ["edge"] * (80 - after), where(results)
    slowest = max(seconds for _meta, _result, seconds in results)
    # the deadline, then the frames away are computed here one after another (each the slow edge's time
    # and its detector's), and scheduling slack for a loaded 2-core machine (the suite runs on two
    # workers): far below what a dead TCP connection takes to be noticed
    bound = 0.4 + (away[0] + 1) * (EDGE_MS + 60) / 1000 + 0.5
    assert slowest < bound, f"a frame took {slowest:.3f} s, over {bound:.2f} s ({away[0]} frames were away)"
    stats = dispatch.stats()
    assert sum(stats["fallbacks"].values()) >= 1, stats


def test_a_broker_restart_loses_no_frame(worker: OffloadWorker, edge: Edge, broker: MosquittoBroker) -> None:
    dispatch = edge(deadline_ms=400)
    results = stream(dispatch, 60, during=lambda index: broker.restart() if index == 20 else None)
    exactly_once(results, 60)
    assert "cloud" in where(results)[:20]
    assert "cloud" in where(results)[-15:], "offloads again once the broker is back"


def test_a_deadline_shorter_than_the_round_trip_keeps_every_frame_here(
    worker: OffloadWorker, edge: Edge, proxy: ThrottlingProxy
) -> None:
    proxy.set(delay_s=0.05)  # 100 ms round trip
    dispatch = edge(deadline_ms=60)
    results = stream(dispatch, 20)
    exactly_once(results, 20)
    assert set(where(results)) == {"edge"}
    assert dispatch.stats()["refused"].get("deadline", 0) > 0


def test_answers_for_nobody_and_malformed_answers_are_counted_and_fall_back(
    edge: Edge, broker: MosquittoBroker, detector: PipelineConfig, cache: EngineCache
) -> None:
    """A worker that answers garbage, the wrong shapes or the wrong dtype, and answers for no request."""
    key = protocol.model_key(cache.models.load(detector.model.path).sha256, detector.preprocess)
    liar = MqttClient(broker.settings(client_id="liar"))
    liar.connect()
    answers = iter(["garbage", "shape", "dtype"] * 100)

    def answer(message: Message) -> None:
        request = tensor_codec.decode(message.payload)
        kind = next(answers)
        if kind == "garbage":
            body = b"EOFL\x01 not a message"
        else:
            tensors = {
                "detection_boxes:0": np.zeros((1, 3), np.float32)
                if kind == "shape"
                else np.zeros((1, 100, 4), np.int64),
                "detection_scores:0": np.zeros((1, 100), np.float32),
                "detection_classes:0": np.zeros((1, 100), np.float32),
                "num_detections:0": np.zeros((1,), np.float32),
            }
            body = tensor_codec.encode(tensor_codec.TensorPayload(request.frame_id, request.deadline, tensors), "fp32")
        assert message.response_topic is not None
        liar.publish(message.response_topic, body, qos=1, wait=False, correlation_data=message.correlation_data)

    liar.subscribe(protocol.worker_subscription(), answer)
    reporting = threading.Event()

    def report_load() -> None:  # every 0.5 s, as a worker does: a report older than 3 s counts for nothing
        while not reporting.wait(0.5):
            load = protocol.WorkerLoad(
                worker="liar", profile="x86-cpu", models={key: protocol.ModelTimes(whole_ms=1.0)}, at=time.time()
            )
            liar.publish(protocol.load_topic("liar"), load.model_dump_json(), qos=1, retain=True)

    reporter = threading.Thread(target=report_load, daemon=True)
    reporter.start()
    try:
        dispatch = edge(deadline_ms=400, fixed="cloud")
        liar.publish(protocol.response_topic(DEVICE), b"forged", qos=1, correlation_data=b"\x00" * 16)
        results = stream(dispatch, 12)
        exactly_once(results, 12)
        assert set(where(results)) == {"edge"}, "every malformed answer falls back"
        stats = dispatch.stats()
        assert stats["bad_answers"] >= 10 and stats["fallbacks"].get("bad_answer", 0) >= 10, str(stats)
        assert stats["unknown_answers"] == 1, stats
    finally:
        reporting.set()
        reporter.join()
        liar.publish(protocol.load_topic("liar"), b"", qos=1, retain=True)
        liar.disconnect()


def test_escalation_delivers_the_edge_result_first_then_the_cloud_update(
    worker: OffloadWorker, edge: Edge, tmp_path: Path, detector: PipelineConfig
) -> None:
    bigger = tmp_path / "bigger.yaml"  # the worker serves the same detector: enough to see the protocol
    bigger.write_text(yaml.safe_dump({**DETECTOR, "model": {"path": str(detector.model.path)}}))
    dispatch = edge(modes=["edge", "escalate"], escalate={"pipeline": str(bigger), "threshold": 0.99})
    order: list[tuple[int, bool, str | None]] = []
    found: dict[int, int] = {}

    def take(wait_s: float) -> None:
        for meta, result in dispatch.collect(wait_s):
            order.append((meta.index, result.update, result.computed_at))
            if not result.update:
                found[meta.index] = len(result.detections)

    for index in range(10):
        image = FRAMES[index % len(FRAMES)]
        dispatch.submit([Frame(FrameMeta("cam", index, time.time(), image.shape[1], image.shape[0]), image)], [0.0])
        take(0.0)
    unsure = [index for index in range(10) if found.get(index)]  # every detection scores under 0.99
    deadline = time.monotonic() + 5
    while sum(update for _i, update, _w in order) < len(unsure) and time.monotonic() < deadline:
        take(0.05)
    finals = [(i, w) for i, update, w in order if not update]
    updates = [(i, w) for i, update, w in order if update]
    assert finals == [(i, "edge") for i in range(10)]
    assert len(unsure) >= 5, found
    assert sorted(updates) == [(i, "cloud") for i in unsure], order
    for index in unsure:
        assert order.index((index, False, "edge")) < order.index((index, True, "cloud")), "the edge result first"
    assert dispatch.stats()["updates"] == len(unsure)


SPLIT = "split@FeatureExtractor/MobilenetV2/expanded_conv_6/project/BatchNorm/FusedBatchNorm:0+1"


def test_a_split_runs_the_head_here_and_the_tail_on_the_worker(
    broker: MosquittoBroker, detector: PipelineConfig, cpu_profile: DeviceProfile, cache: EngineCache, edge: Edge
) -> None:
    tails = SplitTails([detector], cpu_profile, cache)
    settings = WorkerSettings(worker_id="w-split", report_interval_s=0.2)
    with OffloadWorker([detector], cpu_profile, broker.settings(), settings, cache, tail_builder=tails) as worker:
        key = protocol.model_key(cache.models.load(detector.model.path).sha256, detector.preprocess)
        dispatch = edge(modes=["edge", "split"], cuts=[SPLIT.removeprefix("split@").removesuffix("+1")], fixed=SPLIT)
        part = dispatch.modes[SPLIT].part
        assert part is not None
        worker.tail_for(key, part)  # built on the worker's first request for it; asked for here at once
        wait_until(lambda: part in worker.load().models[key].tails_ms, 30, "the worker's tail")
        wait_until(lambda: SPLIT in dispatch._expected(time.monotonic(), 0.0), 5, "the split to be available")
        results = stream(dispatch, 16)
        exactly_once(results, 16)
        assert where(results).count(SPLIT) >= 14, where(results)
        for meta, result, _seconds in results:
            if result.computed_at == SPLIT:  # head here + tail there = the whole model, the tensors at fp16
                [here] = dispatch.local([Frame(meta, FRAMES[meta.index % len(FRAMES)])])
                assert len(result.detections) == len(here.detections)
    tails.close()
