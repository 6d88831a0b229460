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

- Triton: NVIDIA's tritonserver from the nvidia-pytriton wheel (tools/harness/triton_server.py, its
  own process) with `dynamic_batching` (max batch --batch, max_queue_delay --delay-ms), twice: with a
  default queue policy that rejects past --queue requests queued or past the SLO in the queue (what the
  worker's queue size and deadlines do), and with Triton's default unbounded queue. The model runs
  in pytriton's Python backend through ONNX Runtime (the wheel bundles no onnxruntime backend), so
  each batch takes one more hop (Triton -> stub -> the script's process over shared memory) than a
  native backend would. Clients call it over gRPC (tritonclient's async_infer).
- edge_sdk: `OffloadWorker` in its own process (governance_triton_servers.py --serve), batch size
  --batch, batch delay --delay-ms, queue --queue, serving the same ONNX Runtime session as a tail part, so requests
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
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tools.bench.governance_triton_servers import (  # noqa: E402
    BenchModel,
    OrtRunner,
    Tally,
    triton_side,
    worker_side,
)

DETECTOR = REPO / "models" / "ssdlite_mobilenet_v2_person.onnx"
ASTRONAUT = REPO / "tools" / "assets" / "astronaut.jpg"
RESNET_SIZE = 160


# --- the model and its input ---------------------------------------------------------------------------


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


# --- the run -------------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
    from tools.harness.triton import triton_problem

    problem = triton_problem()
    if problem:
        raise SystemExit(problem)
    report: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}, "models": {}}
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
