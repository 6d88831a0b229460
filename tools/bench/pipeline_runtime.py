"""Multi-process pipeline vs a plain single-process OpenCV loop, stage rates, and live latency.

Usage: python tools/bench/pipeline_runtime.py [--video build/demo/demo.mp4] [--rounds 2]

Prints, measured side by side in one run on the demo model and video:
1. FPS of a hand-written loop (cv2 read -> RGB -> onnxruntime -> SSD decode -> draw -> cv2 write), of
   the SDK's inline runtime, and of the multi-process runtime (default settings, and two inference
   workers with one thread each), with the ratios to the plain loop;
2. each stage's standalone rate and the pipeline's FPS as a fraction of the slowest one;
3. capture-to-result latency p50/p99 for a live 30 FPS camera (realtime synthetic source).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np
import onnxruntime as ort

from edge_sdk.engines.cache import EngineCache
from edge_sdk.pipeline.config import load_pipeline
from edge_sdk.pipeline.metrics import RunSummary
from edge_sdk.pipeline.run import run_pipeline
from edge_sdk.profiles import ProfileCatalog

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "ssdlite_mobilenet_v2_person.onnx"
ASTRONAUT = REPO / "tools" / "assets" / "astronaut.jpg"


def plain_loop(video: Path, out_dir: Path) -> float:
    """What a user writes without the SDK: one process, one frame at a time."""
    session = ort.InferenceSession(str(MODEL), providers=["CPUExecutionProvider"])
    capture = cv2.VideoCapture(str(video))
    writer = None
    frames, started = 0, time.perf_counter()
    with open(out_dir / "plain.jsonl", "w") as results:
        while True:
            ok, frame = capture.read()
            if not ok:
                break
            rgb = cv2.cvtColor(frame, cv2.COLOR_BGR2RGB)[np.newaxis]
            count, boxes, scores, _classes = session.run(
                ["num_detections:0", "detection_boxes:0", "detection_scores:0", "detection_classes:0"],
                {"image_tensor:0": rgb},
            )
            height, width = frame.shape[:2]
            keep = [i for i in range(int(count[0])) if scores[0, i] >= 0.5]
            found = []
            for i in keep:
                y1, x1, y2, x2 = boxes[0, i]
                box = (int(x1 * width), int(y1 * height), int(x2 * width), int(y2 * height))
                cv2.rectangle(frame, box[:2], box[2:], (0, 0, 255), 2)
                found.append({"score": float(scores[0, i]), "box": box})
            results.write(f'{{"frame": {frames}, "detections": {found}}}\n'.replace("'", '"'))
            if writer is None:
                writer = cv2.VideoWriter(
                    str(out_dir / "plain.mp4"), cv2.VideoWriter_fourcc(*"mp4v"), 30, (width, height)
                )
            writer.write(frame)
            frames += 1
    writer.release()
    return frames / (time.perf_counter() - started)


def sdk_run(video: Path, out_dir: Path, runtime: str, profile_name: str = "x86-cpu") -> RunSummary:
    path = out_dir / "pipeline.yaml"
    path.write_text(
        f"name: bench\nmodel: {{path: {MODEL}}}\nsources: [{{uri: '{video}', name: demo}}]\n"
        "postprocess: {type: ssd, labels: [person]}\n"
        "sinks: [{type: jsonl, path: sdk.jsonl}, {type: video, path: sdk.mp4}]\n"
        f"runtime: {runtime}\n"
    )
    profile = ProfileCatalog(REPO / "device_profiles").load(profile_name)
    return run_pipeline(load_pipeline(path), profile, EngineCache(out_dir / "cache"))


def capture_rate(video: Path) -> float:
    capture = cv2.VideoCapture(str(video))
    frames, started = 0, time.perf_counter()
    while capture.read()[0]:
        frames += 1
    return frames / (time.perf_counter() - started)


def _infer_worker(threads: int, seconds: float, frame: np.ndarray, counts: mp.Queue) -> None:  # type: ignore[type-arg]
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(str(MODEL), options, providers=["CPUExecutionProvider"])
    feed = {"image_tensor:0": frame}
    session.run(None, feed)
    frames, deadline = 0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        session.run(None, feed)
        frames += 1
    counts.put(frames / seconds)


def inference_rate(video: Path, workers: int, threads: int, seconds: float = 8.0) -> float:
    """Standalone throughput of `workers` inference processes running side by side."""
    _ok, frame = cv2.VideoCapture(str(video)).read()
    rgb = np.ascontiguousarray(frame[:, :, ::-1][np.newaxis])
    ctx = mp.get_context("spawn")
    counts = ctx.Queue()
    procs = [ctx.Process(target=_infer_worker, args=(threads, seconds, rgb, counts)) for _ in range(workers)]
    for p in procs:
        p.start()
    total = sum(counts.get() for _ in procs)
    for p in procs:
        p.join()
    return total


def output_rate(video: Path, out_dir: Path) -> float:
    """Post-process + JSONL + annotated video for one result per frame, standalone."""
    from edge_sdk.core.geometry import InputGeometry
    from edge_sdk.core.results import FrameMeta
    from edge_sdk.postprocess.ssd import SsdPostprocessor, SsdSpec
    from edge_sdk.sinks import SinkFanout
    from edge_sdk.sinks.jsonl import JsonlSink
    from edge_sdk.sinks.video import VideoSink

    capture = cv2.VideoCapture(str(video))
    frames_bgr = []
    while (read := capture.read())[0]:
        frames_bgr.append(read[1])
    session = ort.InferenceSession(str(MODEL), providers=["CPUExecutionProvider"])
    outputs = session.run(None, {"image_tensor:0": np.ascontiguousarray(frames_bgr[0][:, :, ::-1][np.newaxis])})
    names = [o.name for o in session.get_outputs()]
    one = {name: value[0] for name, value in zip(names, outputs, strict=True)}
    post = SsdPostprocessor(SsdSpec(type="ssd", labels=["person"]))
    sinks = SinkFanout([JsonlSink(out_dir / "out.jsonl"), VideoSink(out_dir / "out.mp4")])
    sinks.open()
    height, width = frames_bgr[0].shape[:2]
    started = time.perf_counter()
    for index, image in enumerate(frames_bgr):
        meta = FrameMeta("demo", index, time.time(), width, height)
        sinks.write(post(one, meta, InputGeometry.identity(width, height)), image)
    sinks.close()
    return len(frames_bgr) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--video", type=Path, default=REPO / "build" / "demo" / "demo.mp4")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if not args.video.exists():
        raise SystemExit(f"{args.video} is missing: run `make demo` (or tools/make_demo_video.py) first")
    print(f"machine: {os.cpu_count()} cores; video {args.video.name}; model {MODEL.name}")
    rates: dict[str, list[float]] = {}
    summaries: dict[str, RunSummary] = {}
    configs = {
        "sdk inline loop": "{mode: inline}",
        "sdk processes (defaults)": "{mode: processes}",
        "sdk processes, 2 workers x 1 thread": "{mode: processes, inference_workers: 2, inference_threads: 1}",
    }
    with tempfile.TemporaryDirectory(prefix="edge-sdk-bench-") as scratch:
        out = Path(scratch)
        sdk_run(args.video, out, "{mode: inline}")  # build and cache the engine, warm the page cache
        for _ in range(args.rounds):
            rates.setdefault("plain OpenCV loop", []).append(plain_loop(args.video, out))
            for name, runtime in configs.items():
                summary = sdk_run(args.video, out, runtime)
                rates.setdefault(name, []).append(summary.fps)
                summaries[name] = summary
        plain = statistics.median(rates["plain OpenCV loop"])
        print("\n1. throughput, median of rounds (frames/s), ratio to the plain loop")
        for name, values in rates.items():
            fps = statistics.median(values)
            print(f"   {name:38s} {fps:6.1f}  x{fps / plain:.2f}   rounds {[round(v, 1) for v in values]}")

        best_name = "sdk processes, 2 workers x 1 thread"
        stage_rates = {
            "capture (decode)": capture_rate(args.video),
            "inference, 2 workers x 1 thread": inference_rate(args.video, workers=2, threads=1),
            "output (postprocess + jsonl + video)": output_rate(args.video, out),
        }
        slowest = min(stage_rates.values())
        pipeline_fps = statistics.median(rates[best_name])
        print("\n2. standalone stage rates (frames/s)")
        for name, rate in stage_rates.items():
            print(f"   {name:38s} {rate:6.1f}")
        print(f"   pipeline ({best_name}) {pipeline_fps:.1f} = {pipeline_fps / slowest:.2f} of the slowest stage")

        live = f"synthetic://?image={ASTRONAUT}&frames=300&size=640x480&fps=30&realtime=true"
        path = out / "live.yaml"
        path.write_text(
            f"name: live\nmodel: {{path: {MODEL}}}\nsources: [{{uri: '{live}', name: cam}}]\n"
            "postprocess: {type: ssd, labels: [person]}\nsinks: [{type: jsonl, path: live.jsonl}]\n"
        )
        profile = ProfileCatalog(REPO / "device_profiles").load("x86-cpu")
        summary = run_pipeline(load_pipeline(path), profile, EngineCache(out / "cache"))
        print("\n3. live 30 FPS camera (640x480, 300 frames), default runtime")
        print(
            f"   delivered {summary.frames}, dropped {summary.dropped.get('cam', 0)}, {summary.fps:.1f} FPS, "
            f"capture-to-result p50 {summary.latency_p50_ms:.1f} ms, p99 {summary.latency_p99_ms:.1f} ms"
        )


if __name__ == "__main__":
    main()
