"""Adaptive batching under a latency SLO against every static batch, on a real engine, in one run.

Usage: python tools/bench/governance_batching.py [--models cnn,detector] [--profile x86-cpu]
       [--loads 0.3,0.7,0.9,1.2,2.0] [--seconds 4] [--slo-ms 0] [--statics 1,2,4,8,16] [--delays-ms 0,5]
       [--max-batch 16] [--threads 0] [--json PATH]

Per model (the ResNet-18-sized CNN of tools/harness, float32 [N, 3, 224, 224]; the demo detector with its
preprocessing folded in, raw 480x480 uint8 frames): the engine is built by `prepare_engine` for the
profile, each batch size is timed, and the capacity is the most frames/s a batch carries with two of its
calls inside the SLO (a frame waits for the batch before its own). The SLO (--slo-ms 0: 5x the time of
one frame alone) is the p99 target from a request's arrival to its result.

Each load level is a Poisson arrival stream at that share of the capacity, for --seconds, put into the
offload worker's own RequestQueue (cloud_offload/worker_batches.py) by a thread, and served on the main
thread by the engine, batched either by a static rule (`take_batch`: up to B requests, waiting up to D ms
for them) or by the SLO batcher (`take_slo_batch`: edge_sdk/serving/batching.py, seeded with the
measured batch times as the worker seeds it). Per load: for each rule, frames/s served within the SLO
(goodput), p50/p99 of the requests it served, and what it shed (the static rules shed nothing: their late
requests count against their goodput); then the best static rule and adaptive / best. The target (issue
15): adaptive >= 0.95 of the best static at every load, with its p99 within the SLO.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from cloud_offload.tensor_codec import TensorPayload  # noqa: E402
from cloud_offload.worker_batches import Request, RequestQueue, SloBatchers  # noqa: E402
from edge_sdk.serving.batching import SloBatcher, batch_buckets  # noqa: E402

NO_DEADLINE = TensorPayload(0, float("inf"), {})
"""A request's payload here: the engine's input is the bench's own sample, and no edge deadline applies."""
MIN_AUTO_SLO_MS = 20.0
"""The automatic SLO's floor: below it a Python serving loop's own jitter (thread switches, the GIL)
is what is measured, not the batching."""


@dataclass
class Outcome:
    rule: str
    latencies_ms: np.ndarray
    shed: int
    """Requests not served: shed by the SLO batcher, or refused by the full queue."""
    seconds: float
    mean_batch: float = 0.0
    lag_p99_ms: float = 0.0
    """p99 of how late the arrivals thread put a request: above a few ms, the loop measures itself."""
    run_p99_ms: float = 0.0
    """p99 of the engine calls inside the loop: far above the batch's measured time, the engine stalled."""

    def goodput(self, slo_ms: float) -> float:
        return float(np.sum(self.latencies_ms <= slo_ms)) / self.seconds

    def percentile(self, q: float) -> float:
        return float(np.percentile(self.latencies_ms, q)) if self.latencies_ms.size else float("nan")


def build_runner(
    name: str,
    profile_name: str,
    folder: Path,
    threads: int | None,
    conv_algo_search: str | None = None,
    shape_sessions: int = 0,
) -> tuple[Any, np.ndarray]:
    """(an open runner, one request's input) for the model `name`."""
    from edge_sdk.core.model_file import ModelFile
    from edge_sdk.engines.benchmark import make_input
    from edge_sdk.engines.cache import EngineCache
    from edge_sdk.engines.engine import prepare_engine
    from edge_sdk.pipeline.config import load_pipeline
    from edge_sdk.pipeline.engine_setup import pipeline_graph
    from edge_sdk.profiles import ProfileCatalog
    from tools.harness.onnx_models import float_classifier, resnet18_like

    catalog = ProfileCatalog()
    if conv_algo_search or shape_sessions:
        catalog = ProfileCatalog(
            profile_variant(catalog.directory, profile_name, folder, conv_algo_search, shape_sessions)
        )
    profile = catalog.load(profile_name)
    cache = EngineCache(folder / "cache")
    if name == "cnn":
        model = ModelFile.load(resnet18_like(folder / "cnn.onnx"))
        engine = prepare_engine(model, profile, "fp32", cache)
    elif name == "tiny":  # microseconds a call: what the serving loop itself carries
        model = ModelFile.load(float_classifier(folder / "tiny.onnx"))
        engine = prepare_engine(model, profile, "fp32", cache)
    else:
        config = load_pipeline(REPO / "pipelines" / "demo.yaml")
        model = ModelFile.load(config.model.path)
        engine = prepare_engine(model, profile, "fp32", cache, graph=pipeline_graph(config, model))
    runner = engine.open(threads=threads)
    runner.activate()
    meta = runner.inputs[0]
    return runner, make_input(meta, 1, 480, np.random.default_rng(0))


def profile_variant(
    directory: Path, name: str, folder: Path, conv_algo_search: str | None, shape_sessions: int
) -> Path:
    """A copy of the profile `name` whose ONNX Runtime routes pick convolution algorithms by `conv_algo_search`
    (None: as written) and keep `shape_sessions` sessions per engine (0: as written); its folder."""
    import yaml

    profile = yaml.safe_load((directory / f"{name}.yaml").read_text())
    for key in ("engine", "fallback_engine"):
        engine = profile.get(key) or {}
        if engine.get("backend") != "onnxruntime":
            continue
        if shape_sessions:
            engine["shape_sessions"] = shape_sessions
        for provider in engine.get("execution_providers", []):
            if provider.get("type") == "cuda" and conv_algo_search:
                provider["conv_algo_search"] = conv_algo_search
    copy = folder / "profiles"
    copy.mkdir(exist_ok=True)
    (copy / f"{name}.yaml").write_text(yaml.safe_dump(profile))
    return copy


class OneSession:
    """Every batch runs at its own size on one session."""

    def __init__(self, runner: Any, sample: np.ndarray):
        self.runner, self.sample, self.input_name = runner, sample, runner.inputs[0].name

    def run(self, frames: int) -> None:
        self.runner.infer({self.input_name: np.repeat(self.sample, frames, axis=0)})


class SessionPerSize:
    """A session per batch size, each only ever given its own shape: a batch is padded to the smallest size
    that holds it. On ONNX Runtime's CUDA provider a session's input shape change costs tens of ms to
    seconds each time, even for a shape it ran before (tools/gpu/serve_stalls.py, docs/benchmarks.md)."""

    def __init__(self, open_runner: Any, sample: np.ndarray, sizes: list[int]):
        self.runners = {size: open_runner() for size in sorted(sizes)}
        self.sample, self.input_name = sample, self.runners[sizes[0]].inputs[0].name

    def run(self, frames: int) -> None:
        size = next((size for size in self.runners if size >= frames), max(self.runners))
        self.runners[size].infer({self.input_name: np.repeat(self.sample, size, axis=0)})


def warm_every_size(engine: Any, largest: int) -> float:
    """Run each batch size 1..largest once; seconds taken. A static rule runs whatever is waiting, any size
    up to its batch, and ONNX Runtime's CUDA provider searches convolution algorithms for every input shape
    it meets for the first time (seconds on a GPU): unwarmed, those searches land inside the measurement.
    A server warms its shapes at load, so both rules are measured warm."""
    started = time.perf_counter()
    for size in range(1, largest + 1):
        engine.run(size)
    return time.perf_counter() - started


def batch_times(engine: Any, sizes: list[int]) -> dict[int, float]:
    times = {}
    for size in sizes:
        engine.run(size)
        samples = []
        for _ in range(5):  # a fresh batch each call, stacked as the serving loop stacks it
            started = time.perf_counter()
            engine.run(size)
            samples.append((time.perf_counter() - started) * 1000)
        times[size] = float(np.median(samples))
    return times


def serve(
    engine: Any,
    rate: float,
    seconds: float,
    rule: str,
    take: Any,
    queue: RequestQueue,
    on_batch: Any = None,
) -> Outcome:
    rng = np.random.default_rng(7)
    gaps = rng.exponential(1.0 / rate, int(rate * seconds * 1.5) + 10)
    latencies: list[float] = []
    rejected: list[float] = []
    lags: list[float] = []
    """How late each request was put, against its arrival time: the arrivals thread falling behind."""
    """Requests the full queue refused (the worker answers them 'worker overloaded')."""
    batches: list[int] = []
    runs_ms: list[float] = []
    shed_total = 0
    start = time.monotonic() + 0.05

    def arrive() -> None:
        at = start
        for gap in gaps:
            at += gap
            if at - start > seconds:
                break
            delay = at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            lags.append(time.monotonic() - at)
            if not queue.put(Request("bench", "m", "whole", "x", "", b"", NO_DEADLINE, arrived=at)):
                rejected.append(at)
        queue.close()

    producer = threading.Thread(target=arrive, daemon=True)
    producer.start()
    while True:
        batch, shed = take(queue)
        shed_total += len(shed)
        if not batch:
            if not producer.is_alive() and not len(queue):
                break
            continue
        started = time.monotonic()
        engine.run(len(batch))
        finished = time.monotonic()
        runs_ms.append((finished - started) * 1000)
        if on_batch is not None:
            on_batch(len(batch), (finished - started) * 1000)
        latencies += [(finished - request.arrived) * 1000 for request in batch]
        batches.append(len(batch))
    producer.join()
    lag_p99 = float(np.percentile(lags, 99) * 1000) if lags else 0.0
    run_p99 = float(np.percentile(runs_ms, 99)) if runs_ms else 0.0
    return Outcome(
        rule, np.array(latencies), shed_total + len(rejected), seconds, float(np.mean(batches or [0])), lag_p99, run_p99
    )


def static_rule(batch: int, delay_ms: float) -> Any:
    return lambda queue: (queue.take_batch(batch, delay_ms / 1000, timeout=0.05), [])


def run_model(name: str, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    def open_runner() -> Any:
        return build_runner(
            name, args.profile, folder, args.threads or None, args.conv_algo_search, args.shape_sessions
        )

    runner, sample = open_runner()
    sizes = sorted({*batch_buckets(args.max_batch), *args.statics})
    if args.session_per_size:
        runner.deactivate()
        engine: Any = SessionPerSize(lambda: open_runner()[0], sample, sizes)
    else:
        engine = OneSession(runner, sample)
    warm_seconds = warm_every_size(engine, max(args.max_batch, *args.statics))
    print(f"\n{name}: every batch size up to {max(args.max_batch, *args.statics)} warmed in {warm_seconds:.1f} s")
    times = batch_times(engine, [s for s in sizes if s <= args.max_batch])
    slo = args.slo_ms or round(max(5 * times[1], MIN_AUTO_SLO_MS), 1)
    capacity = max(size * 1000 / ms for size, ms in times.items() if 2 * ms <= slo)
    print(f"\n{name} on {args.profile}: batch ms " + ", ".join(f"{s}: {ms:.1f}" for s, ms in times.items()))
    print(
        f"SLO {slo:g} ms, capacity {capacity:.0f} frames/s (the best batch with two calls within the SLO), queue {args.queue_size}"
    )
    header = f"{'load':>5} {'req/s':>6} | {'rule':<14} {'good/s':>7} {'p50':>7} {'p99':>7} {'shed':>6} {'batch':>6} {'lag99':>6} {'run99':>6}"
    print(header + "\n" + "-" * len(header))
    rows = []
    for load in args.loads:
        rate = load * capacity
        outcomes = []
        for batch in args.statics:
            for delay in args.delays_ms:
                queue = RequestQueue(args.queue_size)
                rule = f"static {batch}/{delay:g}ms"
                take = static_rule(batch, delay)
                outcomes.append(serve(engine, rate, args.seconds, rule, take, queue))
        slo_batchers = SloBatchers(slo, args.max_batch, lambda key: times)  # seeded as the worker seeds it
        seeded: SloBatcher = slo_batchers(("m", "whole", "x"))
        queue = RequestQueue(args.queue_size, slo_batchers)
        adaptive = serve(
            engine, rate, args.seconds, "adaptive",
            lambda q: q.take_slo_batch(timeout=0.05), queue, on_batch=seeded.ran,
        )  # fmt: skip
        best = max(outcomes, key=lambda outcome: outcome.goodput(slo))
        for outcome in [*outcomes, adaptive]:
            mark = " <- best static" if outcome is best else ""
            print(
                f"{load:>5.2f} {rate:>6.0f} | {outcome.rule:<14} {outcome.goodput(slo):>7.1f} "
                f"{outcome.percentile(50):>7.1f} {outcome.percentile(99):>7.1f} {outcome.shed:>6} "
                f"{outcome.mean_batch:>6.1f} {outcome.lag_p99_ms:>6.1f} {outcome.run_p99_ms:>6.1f}{mark}"
            )
        ratio = adaptive.goodput(slo) / best.goodput(slo) if best.goodput(slo) else float("nan")
        print(
            f"{'':>14}adaptive / best static ({best.rule}): {ratio:.3f}, adaptive p99 {adaptive.percentile(99):.1f} ms"
        )
        rows.append(
            {
                "load": load,
                "rate": rate,
                "best_static": best.rule,
                "best_goodput": best.goodput(slo),
                "adaptive_goodput": adaptive.goodput(slo),
                "ratio": ratio,
                "adaptive_p50": adaptive.percentile(50),
                "adaptive_p99": adaptive.percentile(99),
                "adaptive_shed": adaptive.shed,
                "best_p99": best.percentile(99),
            }
        )
    return {
        "model": name, "profile": args.profile, "slo_ms": slo, "capacity": capacity, "times": times,
        "warm_seconds": warm_seconds, "rows": rows,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="cnn,detector")
    parser.add_argument("--profile", default="x86-cpu")
    parser.add_argument("--loads", default="0.3,0.7,0.9,1.2,2.0")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--slo-ms", type=float, default=0.0)
    parser.add_argument("--statics", default="1,2,4,8,16")
    parser.add_argument("--delays-ms", default="0,5")
    parser.add_argument("--max-batch", type=int, default=16)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--queue-size", type=int, default=512, help="the worker's bounded queue (its --queue-size)")
    parser.add_argument(
        "--conv-algo-search",
        choices=["exhaustive", "heuristic", "default"],
        help="override the profile's CUDA provider",
    )
    parser.add_argument(
        "--shape-sessions", type=int, default=0, help="override the profile's shape_sessions (1: one session for all)"
    )
    parser.add_argument(
        "--session-per-size",
        action="store_true",
        help="a session per batch size (a batch padded to the smallest that holds it), for ONNX Runtime's CUDA provider",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    sys.setswitchinterval(0.0005)  # the arrivals thread and the serving loop share the GIL: 5 ms turns are jitter
    args.loads = [float(x) for x in args.loads.split(",")]
    args.statics = [int(x) for x in args.statics.split(",")]
    args.delays_ms = [float(x) for x in args.delays_ms.split(",")]
    results = []
    with tempfile.TemporaryDirectory() as folder:
        for name in args.models.split(","):
            results.append(run_model(name, args, Path(folder)))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
