"""The cloud worker (cloud_offload/worker.py) against a real Mosquitto: what an edge sends comes back
as the outputs its own engine would compute, workers of one group share the requests, and nothing a
client sends (garbage, another device's topic, a stale deadline, too many at once) crashes it or is
answered where it should not be. The shipped detector serves whole frames; a tiny classifier, cut by
the partition planner, serves a tail run by ONNX Runtime directly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
import yaml
from click.testing import CliRunner

from cloud_offload import protocol, tensor_codec
from cloud_offload.cli import offload
from cloud_offload.frame_codec import decode_frame, encode_frame
from cloud_offload.partition import cut_points, measure_cuts, split_model
from cloud_offload.tensor_codec import TensorPayload
from cloud_offload.worker import OffloadWorker, WorkerSettings
from edge_sdk.core.errors import ConfigError
from edge_sdk.core.preprocess import frame_feed
from edge_sdk.core.tensor_meta import TensorMeta
from edge_sdk.engines.cache import EngineCache
from edge_sdk.mqtt import Message, MqttClient
from edge_sdk.pipeline.config import PipelineConfig
from edge_sdk.pipeline.engine_setup import prepare_models
from edge_sdk.profiles import DeviceProfile
from edge_sdk.serving.batching import SloUnreachable
from tests.conftest import DEMO_MODEL, REPO_ROOT
from tests.support.clients import Inbox
from tests.support.waits import wait_until
from tools.harness import onnx_models
from tools.harness.broker import BrokerFactory, MosquittoBroker

DEVICE = "cam1"
SOURCE = {"uri": "synthetic://?frames=4&size=320x240", "name": "cam"}


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> EngineCache:
    """One engine cache for the module: the detector is built once, then every worker loads it."""
    return EngineCache(tmp_path_factory.mktemp("engines"))


@pytest.fixture(scope="module")
def detector() -> PipelineConfig:
    return PipelineConfig.model_validate(
        {
            "name": "detector",
            "model": {"path": str(DEMO_MODEL)},
            "preprocess": {"resize": [300, 300], "color": "rgb", "layout": "nhwc", "dtype": "uint8"},
            "sources": [SOURCE],
            "postprocess": {"type": "ssd", "labels": ["person"]},
        }
    )


@pytest.fixture(scope="module")
def classifier(tmp_path_factory: pytest.TempPathFactory) -> PipelineConfig:
    model = onnx_models.float_classifier(tmp_path_factory.mktemp("models") / "classifier.onnx")
    return PipelineConfig.model_validate(
        {
            "name": "classifier",
            "model": {"path": str(model)},
            "preprocess": {"resize": [8, 8], "layout": "nchw", "dtype": "float32", "scale": 1 / 255},
            "sources": [SOURCE],
            "postprocess": {"type": "classification", "output": "logits"},
        }
    )


def key_of(config: PipelineConfig, cache: EngineCache) -> str:
    return protocol.model_key(cache.models.load(config.model.path).sha256, config.preprocess)


@pytest.fixture
def broker(start_broker: BrokerFactory) -> MosquittoBroker:
    return start_broker()


WorkerFactory = Callable[..., OffloadWorker]


@pytest.fixture
def start_worker(
    broker: MosquittoBroker, detector: PipelineConfig, cpu_profile: DeviceProfile, cache: EngineCache
) -> Iterator[WorkerFactory]:
    started: list[OffloadWorker] = []

    def start(name: str = "w1", pipelines: list[PipelineConfig] | None = None, **settings: Any) -> OffloadWorker:
        worker = OffloadWorker(
            pipelines or [detector],
            cpu_profile,
            broker.settings(),
            WorkerSettings(worker_id=name, report_interval_s=0.2, **settings),
            cache,
        )
        worker.start()
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


class Edge:
    """A device's side of the wire: publishes requests, keeps the answers by correlation."""

    def __init__(self, broker: MosquittoBroker, device: str = DEVICE):
        self.device = device
        self.client = MqttClient(broker.settings(client_id=f"edge-{device}"))
        self.client.connect()
        self.answers = Inbox()
        self.client.subscribe(protocol.response_topic(device), self.answers)

    def send(
        self,
        key: str,
        tensors: dict[str, np.ndarray],
        part: str = protocol.WHOLE,
        frame_id: int = 1,
        deadline_s: float = 30.0,
        payload: bytes | None = None,
        response_topic: str | None = None,
    ) -> bytes:
        correlation = protocol.new_correlation()
        body = payload or tensor_codec.encode(TensorPayload(frame_id, time.time() + deadline_s, tensors), "fp32")
        self.client.publish(
            protocol.request_topic(self.device, key, part),
            body,
            qos=1,
            wait=False,  # back to back, as an edge sends them
            response_topic=response_topic or protocol.response_topic(self.device),
            correlation_data=correlation,
        )
        return correlation

    def answer(self, correlation: bytes, timeout: float = 10.0) -> TensorPayload:
        message = self.answers.wait(lambda m: m.correlation_data == correlation, "the worker's answer", timeout)
        return tensor_codec.decode(message.payload)

    def close(self) -> None:
        self.client.disconnect()


@pytest.fixture
def edge(broker: MosquittoBroker) -> Iterator[Edge]:
    device = Edge(broker)
    yield device
    device.close()


def image(frame: np.ndarray, quality: int = 85) -> dict[str, np.ndarray]:
    return {protocol.IMAGE_TENSOR: np.frombuffer(encode_frame(frame, max_side=300, quality=quality), np.uint8)}


def error_of(payload: TensorPayload) -> str:
    assert protocol.ERROR_TENSOR in payload.tensors, f"expected an error answer, got {sorted(payload.tensors)}"
    return payload.tensors[protocol.ERROR_TENSOR].tobytes().decode()


def retained(broker: MosquittoBroker, topic: str, quiet_s: float = 0.5) -> list[Message]:
    """What a fresh subscriber to `topic` gets as retained (live reports after it come unflagged)."""
    inbox = Inbox()
    with MqttClient(broker.settings()) as client:
        client.subscribe(topic, inbox)
        time.sleep(quiet_s)
        return [m for m in inbox.messages if m.retain]


def test_a_frame_sent_as_jpeg_comes_back_as_the_outputs_of_the_engine_on_that_frame(
    start_worker: WorkerFactory,
    edge: Edge,
    broker: MosquittoBroker,
    detector: PipelineConfig,
    cpu_profile: DeviceProfile,
    cache: EngineCache,
    astronaut_bgr: np.ndarray,
) -> None:
    # given a worker serving the detector (fp16 answers) and an edge that sends it a frame as JPEG
    worker = start_worker()
    key = key_of(detector, cache)
    tensors = image(astronaut_bgr)
    # when
    answer = edge.answer(edge.send(key, tensors, frame_id=77))
    # then the answer holds what the engine computes on the decoded JPEG, within fp16
    models = prepare_models(detector, cpu_profile, cache)
    feed = frame_feed(models.preprocess, models.engine_input)
    with models.primary.open() as runner:
        local = runner.infer({models.input_name: feed(decode_frame(tensors[protocol.IMAGE_TENSOR].tobytes()))})
    assert answer.frame_id == 77
    assert set(answer.tensors) == set(local) | {protocol.WORKER_MS_TENSOR}
    for name, value in local.items():
        np.testing.assert_allclose(answer.tensors[name], value, rtol=2e-3, atol=2e-3, err_msg=name)
    assert int(local["num_detections:0"][0]) > 0, "the astronaut is found"
    queued_ms, compute_ms = answer.tensors[protocol.WORKER_MS_TENSOR]
    assert answer.tensors[protocol.WORKER_MS_TENSOR].dtype == np.float32 and queued_ms >= 0 and compute_ms > 0
    wait_until(lambda: worker.stats.served == 1, 5, "the answer to be counted (after it is handed to paho)")
    assert worker.stats.batches == 1
    # and its load report is retained (every 0.2 s here), with the model's compute time
    loads: list[protocol.WorkerLoad] = []

    def reported_served() -> bool:
        reports = retained(broker, protocol.load_topic("w1"), 0.1)
        loads[:] = [protocol.WorkerLoad.model_validate_json(report.payload) for report in reports]
        return len(loads) == 1 and loads[0].served == 1

    wait_until(reported_served, 5, "a retained report counting the answer")
    load = loads[0]
    assert load.worker == "w1" and load.profile == cpu_profile.name
    assert load.models[key].whole_ms is not None and load.models[key].whole_ms > 0


def test_two_workers_of_one_group_share_the_requests_and_each_is_answered_once(
    start_worker: WorkerFactory, edge: Edge, detector: PipelineConfig, cache: EngineCache, astronaut_bgr: np.ndarray
) -> None:
    workers = [start_worker("w1"), start_worker("w2")]
    key = key_of(detector, cache)
    tensors = image(astronaut_bgr, quality=60)
    # when 40 requests go out at once
    sent = {edge.send(key, tensors, frame_id=i) for i in range(40)}
    # then every one is answered, exactly once, and both workers computed some
    wait_until(lambda: len(edge.answers.messages) >= 40, 20, "40 answers")
    answers = edge.answers.settle(0.3)
    assert sorted(m.correlation_data or b"" for m in answers) == sorted(sent)
    assert all(protocol.ERROR_TENSOR not in tensor_codec.decode(m.payload).tensors for m in answers)
    wait_until(lambda: sum(w.stats.served for w in workers) == 40, 5, "every answer to be counted")
    served = [w.stats.served for w in workers]
    assert sum(served) == 40 and min(served) > 0, served
    assert max(w.stats.mean_batch for w in workers) > 1.0, "requests that arrive together share an engine call"


def test_bad_requests_get_an_error_answer_and_a_foreign_response_topic_gets_none(
    start_worker: WorkerFactory,
    edge: Edge,
    broker: MosquittoBroker,
    detector: PipelineConfig,
    cache: EngineCache,
    astronaut_bgr: np.ndarray,
) -> None:
    worker = start_worker()
    key = key_of(detector, cache)
    # garbage, an unknown model, a tail nobody built, a JPEG that is not one, the wrong tensors
    cases = {
        edge.send(key, {}, payload=b"\x00garbage" * 10): "bad payload",
        edge.send("0123456789abcdef", image(astronaut_bgr)): "unknown model",
        edge.send(key, {"x": np.zeros(4, np.float32)}, part="tail-000000000000"): "tail not ready",
        edge.send(key, {protocol.IMAGE_TENSOR: np.frombuffer(b"\xff\xd8\xff" + bytes(40), np.uint8)}): "bad",
        edge.send(key, {"frame": np.zeros((1, 300, 300, 3), np.uint8)}): "expected one tensor '@image'",
    }
    for correlation, expected in cases.items():
        assert expected in error_of(edge.answer(correlation))
    # a request naming another device's response topic is dropped, not answered there
    elsewhere = Inbox()
    edge.client.subscribe(protocol.response_topic("cam2"), elsewhere)
    edge.send(key, image(astronaut_bgr), response_topic=protocol.response_topic("cam2"))
    wait_until(lambda: worker.stats.refused == 1, 5, "the request to be refused")
    assert elsewhere.settle(0.3) == []
    assert len(edge.answers.settle(0.1)) == len(cases)
    assert worker.stats.errors == len(cases) and worker.stats.served == 0
    # and the worker still serves
    assert protocol.ERROR_TENSOR not in edge.answer(edge.send(key, image(astronaut_bgr))).tensors


def test_an_expired_request_is_dropped_and_counted_and_a_full_queue_answers_overloaded(
    start_worker: WorkerFactory, edge: Edge, detector: PipelineConfig, cache: EngineCache, astronaut_bgr: np.ndarray
) -> None:
    # given a worker with room for one request, which it holds 500 ms for its batch to fill
    worker = start_worker(queue_size=1, batch_delay_ms=500)
    key = key_of(detector, cache)
    # when a request comes with its deadline already past
    edge.send(key, image(astronaut_bgr), deadline_s=-1.0)
    wait_until(lambda: worker.stats.expired == 1, 5, "the stale request to be counted")
    assert edge.answers.settle(0.2) == []
    # when three come at once: the first waits for its batch, the others find the queue full
    first, *rest = [edge.send(key, image(astronaut_bgr), frame_id=i) for i in range(3)]
    for correlation in rest:
        assert error_of(edge.answer(correlation)) == "worker overloaded"
    assert protocol.ERROR_TENSOR not in edge.answer(first).tensors
    wait_until(lambda: worker.stats.served == 1, 5, "the answer to be counted")
    assert worker.stats.overloaded == 2


class OrtTail:
    """A tail runner made straight from ONNX Runtime: what the worker needs of a tail, nothing more."""

    def __init__(self, model: onnx.ModelProto):
        self.session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        self.inputs = tuple(
            TensorMeta(arg.name, np.dtype(np.float32), tuple(arg.shape)) for arg in self.session.get_inputs()
        )
        self.names = [arg.name for arg in self.session.get_outputs()]
        self.calls: list[int] = []

    def infer(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.calls.append(next(iter(feed.values())).shape[0])
        return dict(zip(self.names, self.session.run(self.names, feed), strict=True))


def test_a_registered_tail_computes_the_rest_of_the_model_on_the_cut_tensors(
    start_worker: WorkerFactory, edge: Edge, classifier: PipelineConfig, cache: EngineCache
) -> None:
    # given the classifier cut after its ReLU: the edge runs the head, the worker the tail
    graph = onnx.load(str(classifier.model.path))
    rng = np.random.default_rng(3)
    inputs = [rng.random((1, 3, 8, 8), dtype=np.float32) for _ in range(4)]
    measured = next(
        m for m in measure_cuts(graph, cut_points(graph), {"images": inputs[0]}) if m.cut.tensors == ("relu",)
    )
    head, tail = split_model(graph, measured)
    part = protocol.tail_part(measured.cut.tensors)
    worker = start_worker(pipelines=[classifier], batch_delay_ms=50, answer_precision="fp32")
    key = key_of(classifier, cache)
    runner = OrtTail(tail)
    worker.add_tail(key, part, runner)
    head_session = onnxruntime.InferenceSession(head.SerializeToString(), providers=["CPUExecutionProvider"])
    whole = onnxruntime.InferenceSession(graph.SerializeToString(), providers=["CPUExecutionProvider"])
    # when four frames' cut tensors are sent at once
    sent = [edge.send(key, {"relu": head_session.run(["relu"], {"images": x})[0]}, part=part) for x in inputs]
    # then each answer is the whole model's logits for its frame, and they shared engine calls
    for correlation, x in zip(sent, inputs, strict=True):
        answer = edge.answer(correlation)
        np.testing.assert_allclose(answer.tensors["logits"], whole.run(["logits"], {"images": x})[0], rtol=1e-5)
    assert sum(runner.calls) == 4 and max(runner.calls) > 1, runner.calls
    assert worker.load().models[key].tails_ms.keys() == {part}
    # and a tensor of the wrong shape is answered with what was expected
    wrong = edge.send(key, {"relu": np.zeros((1, 4, 8, 8), np.float32)}, part=part)
    assert "expected size 8 on axis 1" in error_of(edge.answer(wrong))


def test_a_tail_builder_is_asked_once_and_its_tail_served_when_ready(
    broker: MosquittoBroker, edge: Edge, classifier: PipelineConfig, cpu_profile: DeviceProfile, cache: EngineCache
) -> None:
    graph = onnx.load(str(classifier.model.path))
    feed = {"images": np.ones((1, 3, 8, 8), np.float32)}
    measured = next(m for m in measure_cuts(graph, cut_points(graph), feed) if m.cut.tensors == ("pool",))
    _head, tail = split_model(graph, measured)
    part = protocol.tail_part(measured.cut.tensors)
    asked: list[tuple[str, str, tuple[str, ...]]] = []

    def build(key: str, wanted: str, tensors: Sequence[str]) -> OrtTail | None:
        asked.append((key, wanted, tuple(tensors)))
        time.sleep(0.3)
        return OrtTail(tail) if wanted == part else None

    settings = WorkerSettings(worker_id="w-tails")
    with OffloadWorker([classifier], cpu_profile, broker.settings(), settings, cache, tail_builder=build) as worker:
        key = key_of(classifier, cache)
        pooled = {"pool": np.ones((1, 8, 1, 1), np.float32)}
        assert error_of(edge.answer(edge.send(key, pooled, part=part))) == "tail not ready"
        wait_until(lambda: worker.tail_for(key, part) is not None, 5, "the tail to be built")
        assert protocol.ERROR_TENSOR not in edge.answer(edge.send(key, pooled, part=part)).tensors
        missing = edge.answer(edge.send(key, pooled, part="tail-ffffffffffff"))
        assert error_of(missing) == "tail not ready"

        def says_why() -> bool:
            later = error_of(edge.answer(edge.send(key, pooled, part="tail-ffffffffffff")))
            return later.startswith("tail not ready (") and "no cut" in later

        wait_until(says_why, 5, "the failed build's reason in the answer", interval=0.2)
    assert asked == [(key, part, ("pool",)), (key, "tail-ffffffffffff", ("pool",))], "with the cut the request names"


def test_a_broker_without_mqtt_v5_is_refused_in_one_line(
    broker: MosquittoBroker, detector: PipelineConfig, cpu_profile: DeviceProfile
) -> None:
    with pytest.raises(ConfigError, match="MQTT v5"):
        OffloadWorker([detector], cpu_profile, broker.settings(protocol="v311"), WorkerSettings(worker_id="w"))


# --- the command, as a process -------------------------------------------------------------------------


def command_files(broker: MosquittoBroker, tmp_path: Path, **broker_fields: Any) -> list[str]:
    """The worker command's --broker and --pipeline arguments, for the detector on this broker."""
    broker_file = tmp_path / "broker.yaml"
    broker_file.write_text(yaml.safe_dump({"host": broker.host, "port": broker.port, **broker_fields}))
    pipeline = tmp_path / "detector.yaml"
    pipeline.write_text(
        yaml.safe_dump(
            {
                "name": "detector",
                "model": {"path": str(DEMO_MODEL)},
                "preprocess": {"resize": [300, 300], "color": "rgb", "layout": "nhwc", "dtype": "uint8"},
                "sources": [SOURCE],
                "postprocess": {"type": "ssd", "labels": ["person"]},
            }
        )
    )
    return ["--broker", str(broker_file), "--pipeline", str(pipeline), "--profile", "x86-cpu"]


def test_the_command_refuses_a_bad_setting_in_one_line_and_leaves_the_signal_handlers_as_they_were(
    broker: MosquittoBroker, tmp_path: Path
) -> None:
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    runner = CliRunner()
    for arguments, expected in (
        (["--id", "a/b"], "one MQTT topic level"),
        (["--group", "a+b"], "one MQTT topic level"),
    ):
        result = runner.invoke(offload, ["worker", *command_files(broker, tmp_path), *arguments])
        assert isinstance(result.exception, ConfigError) and expected in str(result.exception), result.output
    v311 = runner.invoke(offload, ["worker", *command_files(broker, tmp_path, protocol="v311"), "--id", "w"])
    assert isinstance(v311.exception, ConfigError) and "MQTT v5" in str(v311.exception)
    assert {signum: signal.getsignal(signum) for signum in handlers} == handlers


def worker_process(broker: MosquittoBroker, tmp_path: Path, cache: EngineCache, name: str) -> subprocess.Popen[str]:
    command = "from cloud_offload.cli import offload; offload()"
    return subprocess.Popen(
        [sys.executable, "-c", command, "worker", *command_files(broker, tmp_path), "--id", name],
        cwd=REPO_ROOT,
        env={**os.environ, "EDGE_SDK_CACHE_DIR": str(cache.root)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_for_report(broker: MosquittoBroker, name: str, process: subprocess.Popen[str]) -> None:
    inbox = Inbox()
    with MqttClient(broker.settings()) as client:
        client.subscribe(protocol.load_topic(name), inbox)
        wait_until(lambda: inbox.messages or process.poll() is not None, 60, "the worker's load report")
    assert process.poll() is None, process.communicate()[0]


@pytest.mark.slow
def test_a_worker_stopped_with_sigterm_clears_its_report_and_a_killed_one_is_cleared_by_its_will(
    broker: MosquittoBroker, tmp_path: Path, cache: EngineCache, detector: PipelineConfig, cpu_profile: DeviceProfile
) -> None:
    prepare_models(detector, cpu_profile, cache)  # built here once, so both processes only load it
    stopped = worker_process(broker, tmp_path, cache, "w-term")
    killed = worker_process(broker, tmp_path, cache, "w-kill")
    try:
        for name, process in (("w-term", stopped), ("w-kill", killed)):
            wait_for_report(broker, name, process)
        # when one is stopped cleanly and the other killed
        stopped.send_signal(signal.SIGTERM)
        killed.kill()
        output, _ = stopped.communicate(timeout=20)
        killed.wait(timeout=10)
    finally:
        for process in (stopped, killed):
            if process.poll() is None:
                process.kill()
                process.wait()
    # then the clean one says what it did, and neither leaves a report behind
    assert stopped.returncode == 0, output
    assert "w-term: ready" in output and "w-term: stopped; served 0" in output
    assert retained(broker, protocol.load_topic("w-term")) == []
    wait_until(lambda: retained(broker, protocol.load_topic("w-kill"), 0.2) == [], 5, "the will to clear the report")


def test_a_burst_past_capacity_is_served_within_the_slo_or_answered_shed_each_exactly_once(
    start_worker: WorkerFactory, edge: Edge, detector: PipelineConfig, cache: EngineCache, astronaut_bgr: np.ndarray
) -> None:
    # given a worker with a 300 ms SLO, and 100 frames at once: seconds of work on these cores
    worker = start_worker(latency_slo_ms=300.0, batch_size=8, queue_size=200)
    key = key_of(detector, cache)
    frame = image(astronaut_bgr)
    # when
    correlations = [edge.send(key, frame, frame_id=i) for i in range(100)]
    answers = [edge.answer(correlation, timeout=60) for correlation in correlations]
    # then
    errors = [
        a.tensors[protocol.ERROR_TENSOR].tobytes().decode() for a in answers if protocol.ERROR_TENSOR in a.tensors
    ]
    served = len(answers) - len(errors)
    assert errors and set(errors) == {"shed: cannot meet the worker's latency SLO"}
    assert served > 0
    stats = worker.stats
    assert (stats.served, stats.shed) == (served, len(errors))
    assert len(edge.answers.settle(0.3)) == 100, "no request is answered twice"


def test_an_slo_the_warm_up_shows_no_batch_can_meet_is_refused_at_start(start_worker: WorkerFactory) -> None:
    with pytest.raises(SloUnreachable, match=r"model \S+: latency_slo_ms 0\.01 cannot be met"):
        start_worker(latency_slo_ms=0.01)
