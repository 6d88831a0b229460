"""The servers of tools/bench/governance_triton.py, each driven by open-loop arrivals: Triton (pytriton's
tritonserver, tools/harness/triton.py) over gRPC, and edge_sdk's OffloadWorker in a process of its own
(this file with --serve) behind a private Mosquitto; and the model as the worker's tail (`OrtRunner`).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from edge_sdk.core.tensor_meta import TensorMeta  # noqa: E402

PART = "tail-bench0whole"
"""The tail part the worker serves the whole model as, so requests carry the same tensor as Triton's."""
DEVICE = "bench"
Side = Callable[[list[float]], "Tally"]
"""A server under test: arrivals -> what came back."""


@dataclass(frozen=True)
class BenchModel:
    name: str
    path: Path
    pipeline: dict[str, Any]
    """What the worker serves the model as (the tail is registered on its key)."""
    sample: dict[str, np.ndarray]
    """One request's input tensor."""


class OrtRunner:
    """The model as a worker tail: an ONNX Runtime session with one intra-op thread."""

    def __init__(self, path: Path, threads: int = 1):
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self.session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.inputs = tuple(
            TensorMeta(i.name, _np_type(i.type), tuple(d if isinstance(d, int) else "batch" for d in i.shape))
            for i in self.session.get_inputs()
        )
        self.names = [o.name for o in self.session.get_outputs()]

    def infer(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(self.names, self.session.run(None, feed), strict=True))


def _np_type(onnx_type: str) -> np.dtype[Any]:
    return np.dtype({"tensor(float)": np.float32, "tensor(uint8)": np.uint8}[onnx_type])


@dataclass
class Tally:
    sent: list[float] = field(default_factory=list)
    done: dict[int, tuple[float, bool]] = field(default_factory=dict)
    """Request index -> (latency s, answered with outputs)."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, index: int, ok: bool) -> None:
        with self.lock:
            if index not in self.done:
                self.done[index] = (time.perf_counter() - self.sent[index], ok)


def drive(send: Callable[[int], None], arrivals: list[float], tally: Tally, settle_s: float) -> None:
    """Send request i at arrivals[i] (open loop), then wait `settle_s` for the last answers."""
    tally.sent = [0.0] * len(arrivals)
    start = time.perf_counter()
    for index, at in enumerate(arrivals):
        delay = start + at - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        tally.sent[index] = time.perf_counter()
        send(index)
    deadline = time.perf_counter() + settle_s
    while time.perf_counter() < deadline and len(tally.done) < len(arrivals):
        time.sleep(0.02)


# --- Triton ------------------------------------------------------------------------------------------------


@contextmanager
def triton_side(model: BenchModel, args: argparse.Namespace, slo_s: float, work: Path, rejects: bool) -> Iterator[Side]:
    """Triton with `rejects`: a queue policy refusing past --queue queued or the SLO in the queue (what
    the worker's queue size and deadlines do); without: Triton's default, an unbounded queue."""
    import tritonclient.grpc as grpcclient

    from tools.harness.triton import start_triton

    with start_triton(
        model.path,
        model.name,
        work / ("triton-rejecting" if rejects else "triton"),
        max_batch=args.batch,
        queue_delay_us=int(args.delay_ms * 1000),
        threads=1,
        max_queue_size=args.queue if rejects else 0,
        queue_timeout_us=int(slo_s * 1e6) if rejects else 0,
    ) as server:
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        inputs = []
        for name, value in model.sample.items():
            item = grpcclient.InferInput(name, list(value.shape), "UINT8" if value.dtype == np.uint8 else "FP32")
            item.set_data_from_numpy(value)
            inputs.append(item)
        warmed, began = 0, time.monotonic()
        while warmed < 5:  # warm-up: the stub's first calls (one past the queue timeout is rejected: again)
            try:
                client.infer(model.name, inputs)
                warmed += 1
            except grpcclient.InferenceServerException:
                if time.monotonic() - began > 60:
                    raise

        def run(arrivals: list[float]) -> Tally:
            tally = Tally()

            def send(index: int) -> None:
                client.async_infer(
                    model.name,
                    inputs,
                    callback=lambda result, error, i=index: tally.answer(i, error is None),
                    client_timeout=slo_s * 4,
                )

            drive(send, arrivals, tally, settle_s=slo_s * 4 + 1)
            return tally

        try:
            yield run
        finally:
            client.close()


# --- edge_sdk's worker -----------------------------------------------------------------------------------------


def serve(config_json: str) -> None:
    """--serve: the worker process (one tail: the whole model on the input tensor), until SIGTERM."""
    from cloud_offload.protocol import model_key
    from cloud_offload.worker import OffloadWorker, WorkerSettings
    from edge_sdk.engines.cache import EngineCache
    from edge_sdk.mqtt import MqttSettings
    from edge_sdk.pipeline.config import PipelineConfig
    from edge_sdk.profiles import ProfileCatalog

    config = json.loads(config_json)
    pipeline = PipelineConfig.model_validate(config["pipeline"])
    cache = EngineCache(Path(config["cache"]))
    settings = WorkerSettings(
        worker_id="bench",
        batch_size=config["batch"],
        batch_delay_ms=config["delay_ms"],
        queue_size=config["queue"],
        latency_slo_ms=config.get("slo_ms"),
        threads=1,
        answer_precision="fp32",
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    worker = OffloadWorker(
        [pipeline], ProfileCatalog().load("x86-cpu"), MqttSettings(**config["broker"]), settings, cache
    )
    with worker:
        key = model_key(cache.models.load(pipeline.model.path).sha256, pipeline.preprocess)
        worker.add_tail(key, PART, OrtRunner(Path(config["pipeline"]["model"]["path"])))
        print(json.dumps({"key": key}), flush=True)
        stop.wait()


@contextmanager
def worker_side(
    model: BenchModel, args: argparse.Namespace, slo_s: float, work: Path, adaptive: bool = False
) -> Iterator[Side]:
    """The worker with its fixed batcher, or with `adaptive`: --latency-slo-ms at the SLO."""
    from cloud_offload import protocol, tensor_codec
    from cloud_offload.tensor_codec import TensorPayload
    from edge_sdk.mqtt import Message, MqttClient
    from tools.harness.broker import MosquittoBroker

    with ExitStack() as stack:
        broker = MosquittoBroker(work / ("broker-adaptive" if adaptive else "broker")).start()
        stack.callback(broker.stop)
        pipeline = {
            "name": model.name,
            "model": {"path": str(model.path)},
            "sources": [{"uri": "synthetic://?frames=1", "name": "cam"}],
            **model.pipeline,
        }
        config = {
            "pipeline": pipeline,
            "cache": str(work / ("engines-adaptive" if adaptive else "engines")),
            "broker": {"host": broker.host, "port": broker.port},
            "batch": args.batch,
            "delay_ms": args.delay_ms,
            "queue": args.queue,
            "slo_ms": slo_s * 1000 if adaptive else None,
        }
        process = subprocess.Popen(
            [sys.executable, __file__, "--serve", json.dumps(config)],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        stack.callback(_stop_process, process)
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.startswith("{"):
            raise SystemExit(f"the worker did not start: {line}{process.stdout.read()}")
        key = json.loads(line)["key"]
        client = MqttClient(broker.settings(client_id="bench-edge"))
        client.connect()
        stack.callback(client.disconnect)
        topic = protocol.request_topic(DEVICE, key, PART)
        answers = protocol.response_topic(DEVICE)
        current: dict[bytes, tuple[Tally, int]] = {}

        def on_answer(message: Message) -> None:
            found = current.pop(message.correlation_data or b"", None)
            if found is not None:
                payload = tensor_codec.decode(message.payload)
                found[0].answer(found[1], protocol.ERROR_TENSOR not in payload.tensors)

        client.subscribe(answers, on_answer)
        for _ in range(5):  # warm-up, one at a time
            correlation = protocol.new_correlation()
            warm = Tally(sent=[time.perf_counter()])
            current[correlation] = (warm, 0)
            body = tensor_codec.encode(TensorPayload(0, time.time() + 10, model.sample), "fp32", "none")
            client.publish(topic, body, qos=1, response_topic=answers, correlation_data=correlation)
            began = time.monotonic()
            while not warm.done and time.monotonic() - began < 10:
                time.sleep(0.01)
            if not warm.done or not warm.done[0][1]:
                raise SystemExit("the worker did not answer its warm-up request")

        def run(arrivals: list[float]) -> Tally:
            tally = Tally()

            def send(index: int) -> None:
                correlation = protocol.new_correlation()
                current[correlation] = (tally, index)
                body = tensor_codec.encode(TensorPayload(index, time.time() + slo_s, model.sample), "fp32", "none")
                client.publish(topic, body, qos=1, wait=False, response_topic=answers, correlation_data=correlation)

            drive(send, arrivals, tally, settle_s=slo_s * 4 + 1)
            current.clear()
            return tally

        yield run


def _stop_process(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "--serve":
        raise SystemExit("usage: governance_triton_servers.py --serve CONFIG_JSON (started by governance_triton.py)")
    serve(sys.argv[2])
