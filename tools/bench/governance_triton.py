"""edge_sdk's worker batcher side by side with Triton's dynamic batcher: the same ONNX model, the same
CPU, the same Poisson arrivals (a sweep of rates relative to the measured capacity) and a 5x burst.

Usage (needs .venv-triton and mosquitto; `make .venv-triton/.ready` builds the venv, ~30 s):

    make .venv/.test .venv-triton/.ready
    .venv/bin/python tools/bench/governance_triton.py [--models detector,resnet18] [--seconds 6]
        [--loads 0.1,0.3,0.5,0.8,1.0,1.3] [--burst 5] [--slo-ms 0] [--batch 8] [--delay-ms 2] [--queue 64]
        [--adaptive] [--json PATH]

Both servers run on this machine with one ONNX Runtime thread each, both started and warmed up first;
each load level runs on one, then on the other, back to back (the idle one waits), so a change in the
machine's other load between levels hits both alike (the load average is printed per run):

- Triton: NVIDIA's tritonserver from the nvidia-pytriton wheel (tests/support/triton_server.py, its
  own process) with `dynamic_batching` (max batch --batch, max_queue_delay --delay-ms), twice: with a
  default queue policy that rejects past --queue requests queued or past the SLO in the queue (what the
  worker's queue size and deadlines do), and with Triton's default unbounded queue. The model runs
  in pytriton's Python backend through ONNX Runtime (the wheel bundles no onnxruntime backend), so
  each batch takes one more hop (Triton -> stub -> the script's process over shared memory) than a
  native backend would. Clients call it over gRPC (tritonclient's async_infer).
- edge_sdk: `OffloadWorker` in its own process (this script with --serve), batch size --batch, batch
  delay --delay-ms, queue --queue, serving the same ONNX Runtime session as a tail part, so requests
  carry the same input tensor as Triton's (no JPEG decode on this side). Clients publish MQTT v5
  requests through a private Mosquitto, as an edge does, with a deadline of the SLO (a request still
  queued past it is dropped: the edge computes it itself). The worker's fixed batcher; with --adaptive,
  also a worker in its SLO mode (--latency-slo-ms at the SLO: batch and wait chosen per arrival rate,
  what cannot meet the SLO shed at once).

Load: open-loop Poisson arrivals (one seed, the same schedule for both) at --loads x the capacity,
which is what one ONNX Runtime thread computes per second at batch --batch in this process (timed
first); the burst runs at 0.5 x capacity for a third of --seconds, --burst x that for a third, then
0.5 again. SLO (--slo-ms 0): 1.5x the compute time of a full batch, at least 50 ms (a tighter one is
missed by every batch of --batch frames, whichever batcher forms it). Per run: offered rate,
throughput within the SLO (answers within it per second), p50/p99 of the answers, late (answered
past the SLO) and shed (refused, dropped or unanswered: what the edge computes itself).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
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

DETECTOR = REPO / "models" / "ssdlite_mobilenet_v2_person.onnx"
ASTRONAUT = REPO / "tools" / "assets" / "astronaut.jpg"
PART = "tail-bench0whole"
Side = Callable[[list[float]], "Tally"]
"""A server under test: arrivals -> what came back."""
DEVICE = "bench"
RESNET_SIZE = 160


# --- the model and its input ---------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchModel:
    name: str
    path: Path
    pipeline: dict[str, Any]
    """What the worker serves the model as (the tail is registered on its key)."""
    sample: dict[str, np.ndarray]
    """One request's input tensor."""


def bench_model(name: str, work: Path) -> BenchModel:
    import cv2

    image = cv2.imread(str(ASTRONAUT))
    assert image is not None, ASTRONAUT
    if name == "detector":
        frame = cv2.cvtColor(cv2.resize(image, (300, 300)), cv2.COLOR_BGR2RGB)[np.newaxis]
        pipeline = {
            "preprocess": {"resize": [300, 300], "color": "rgb", "layout": "nhwc", "dtype": "uint8"},
            "postprocess": {"type": "ssd", "labels": ["person"]},
        }
        return BenchModel(name, DETECTOR, pipeline, {"image_tensor:0": np.ascontiguousarray(frame)})
    if name == "resnet18":
        from tools.harness.onnx_models import resnet18_like

        path = resnet18_like(work / "resnet18_like.onnx", size=RESNET_SIZE)
        tensor = cv2.resize(image, (RESNET_SIZE, RESNET_SIZE)).astype(np.float32).transpose(2, 0, 1)[np.newaxis] / 255
        pipeline = {
            "preprocess": {
                "resize": [RESNET_SIZE, RESNET_SIZE],
                "layout": "nchw",
                "dtype": "float32",
                "scale": 1 / 255,
            },
            "postprocess": {"type": "classification", "output": "logits"},
        }
        return BenchModel(name, path, pipeline, {"images": np.ascontiguousarray(tensor)})
    raise SystemExit(f"unknown model {name!r} (detector, resnet18)")


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


def capacity(model: BenchModel, batch: int) -> tuple[float, float]:
    """(ms for one frame, frames per second at `batch`) of one ONNX Runtime thread, best of a few."""
    runner = OrtRunner(model.path)
    one = model.sample
    many = {name: np.concatenate([value] * batch) for name, value in one.items()}
    for feed in (one, many):
        runner.infer(feed)
    single = min(_timed(lambda: runner.infer(one)) for _ in range(10))
    batched = min(_timed(lambda: runner.infer(many)) for _ in range(5))
    return single * 1000, batch / batched


def _timed(call: Callable[[], object]) -> float:
    begun = time.perf_counter()
    call()
    return time.perf_counter() - begun


# --- arrivals and what came back ------------------------------------------------------------------------


def poisson(rate_of: Callable[[float], float], seconds: float, seed: int) -> list[float]:
    """Arrival times (s from the start) of a Poisson process whose rate may change over time (thinning)."""
    rng = np.random.default_rng(seed)
    peak = max(rate_of(t) for t in np.linspace(0, seconds, 200))
    times: list[float] = []
    t = 0.0
    while True:
        t += rng.exponential(1 / peak)
        if t >= seconds:
            return times
        if rng.random() < rate_of(t) / peak:
            times.append(t)


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


def summary(tally: Tally, arrivals: list[float], slo_s: float, window: tuple[float, float]) -> dict[str, Any]:
    """Figures over the requests that arrived within `window` (s from the start)."""
    chosen = [i for i, t in enumerate(arrivals) if window[0] <= t < window[1]]
    ok = [tally.done[i][0] for i in chosen if i in tally.done and tally.done[i][1]]
    good = [latency for latency in ok if latency <= slo_s]
    span = window[1] - window[0]
    return {
        "requests": len(chosen),
        "offered_rps": len(chosen) / span,
        "within_slo_rps": len(good) / span,
        "p50_ms": float(np.percentile(ok, 50) * 1000) if ok else None,
        "p99_ms": float(np.percentile(ok, 99) * 1000) if ok else None,
        "late": len(ok) - len(good),
        "shed": len(chosen) - len(ok),
    }


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

    from tests.support.triton import start_triton

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


# --- the run -------------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--models", default="detector,resnet18")
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--loads", default="0.1,0.3,0.5,0.8,1.0,1.3")
    parser.add_argument("--burst", type=float, default=5.0)
    parser.add_argument("--slo-ms", type=float, default=0.0)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--delay-ms", type=float, default=2.0)
    parser.add_argument("--queue", type=int, default=64)
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--adaptive", action="store_true", help="also the worker with --latency-slo-ms at the SLO")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return
    from tests.support.triton import triton_problem

    problem = triton_problem()
    if problem:
        raise SystemExit(problem)
    report: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items() if k != "serve"}, "models": {}}
    with tempfile.TemporaryDirectory(prefix="gov-triton-") as folder:
        work = Path(folder)
        for name in args.models.split(","):
            report["models"][name] = bench_one(bench_model(name, work), args, work / name)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


def bench_one(model: BenchModel, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    one_ms, fps = capacity(model, args.batch)
    slo_s = (args.slo_ms or max(50.0, 1.5 * args.batch / fps * 1000)) / 1000  # a full batch can meet it
    loads = [float(x) for x in args.loads.split(",")]
    seconds = args.seconds
    schedules = [poisson(_steady(load * fps), seconds, args.seed + i) for i, load in enumerate(loads)]
    third = seconds / 3
    base = 0.5 * fps

    def burst_rate(t: float) -> float:
        return base * args.burst if third <= t < 2 * third else base

    schedules.append(poisson(burst_rate, seconds, args.seed + 99))
    print(
        f"\n{model.name}: one frame {one_ms:.1f} ms, capacity {fps:.1f} frames/s at batch {args.batch} "
        f"(one ONNX Runtime thread); SLO {slo_s * 1000:.0f} ms; {seconds:g} s per run",
        flush=True,
    )
    labels = [f"{load:g}x" for load in loads] + [f"burst {args.burst:g}x"]
    print("| load | server | offered/s | within SLO/s | p50 | p99 | late | shed | load avg |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    rows = []
    # both servers up, idle while the other runs; each load level run on one then the other, back to back,
    # so a change of the machine's other load between levels hits both alike
    with (
        triton_side(model, args, slo_s, work, rejects=True) as rejecting,
        triton_side(model, args, slo_s, work, rejects=False) as unbounded,
        worker_side(model, args, slo_s, work) as worker,
        ExitStack() as more,
    ):
        sides = [("triton, queue policy", rejecting), ("triton, default queue", unbounded), ("edge_sdk", worker)]
        if args.adaptive:
            sides.append(("edge_sdk, SLO mode", more.enter_context(worker_side(model, args, slo_s, work, True))))
        for index, (label, arrivals) in enumerate(zip(labels, schedules, strict=True)):
            for side, run in sides:
                tally = run(arrivals)
                row = {"load": label, "server": side, **summary(tally, arrivals, slo_s, (0.0, seconds))}
                row["load_average"] = os.getloadavg()[0]
                print(_line(row), flush=True)
                if index == len(loads):
                    row["in_burst"] = summary(tally, arrivals, slo_s, (third, 2 * third))
                    print(_line({"load": "(the burst third)", "server": side, **row["in_burst"]}), flush=True)
                rows.append(row)
    return {"one_frame_ms": one_ms, "capacity_fps": fps, "slo_ms": slo_s * 1000, "rows": rows}


def _steady(rate: float) -> Callable[[float], float]:
    return lambda _t: rate


def _line(row: dict[str, Any]) -> str:
    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:.0f} ms"

    shed = f"{row['shed']} ({100 * row['shed'] / max(row['requests'], 1):.0f}%)"
    load = f"{row['load_average']:.1f}" if "load_average" in row else ""
    return (
        f"| {row['load']} | {row['server']} | {row['offered_rps']:.1f} | {row['within_slo_rps']:.1f} | "
        f"{ms(row['p50_ms'])} | {ms(row['p99_ms'])} | {row['late']} | {shed} | {load} |"
    )


if __name__ == "__main__":
    main()
