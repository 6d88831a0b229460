"""What crosses the results channel: raw engine outputs decoded by the receiver (before issue 11) vs
the Result decoded by the sender (now), between two processes, side by side in one run.

Usage: python tools/bench/results_queue.py [--frames 300] [--rounds 3] [--pipeline-runs 3] [--profile x86-cpu]

The channel is the runtime's own: `MessageSender` in a spawned process (an inference worker) to a
`MessageListener` in this one (the output stage), over a Unix socket, pickled. Per frame:

- old: the sender copies the frame's rows of the outputs (as the worker did) and sends them in the
  message the worker used to send; the receiver unpickles it and runs the post-processor;
- new: the sender runs the post-processor and sends `InferenceDone` with the Result; the receiver
  unpickles it.

Cases: the demo detector's real outputs on a demo video frame, with its graph's own decode (SSD,
decode: graph, ~2 KB) and cut after the box head (decode: sdk, the raw box encodings and class
scores); and a YOLOv8-640 head (1x84x8400 float32, 2.7 MB) shaped like the real one, numpy-made:
low class scores everywhere but around a few objects, each covered by a cluster of anchors, so NMS
has work. The SDK's own post-processors decode them.

Printed per case and variant, medians of the rounds (rounds alternate old and new): bytes per
message; sender and receiver CPU per frame (process_time over the whole stream, so waiting does not
count); and wall time per frame from the sender's start to the receiver's last decoded frame.

Then (--pipeline-runs, 0 skips it) a whole pipeline whose engine outputs that YOLOv8-640 head: a
synthetic ONNX model (uint8 frames of any size in, the head above out for every frame, plus 0 x the
frame's mean so the engine reads the frame) on the demo video, YOLO post-processing, a JSONL sink,
multi-process (default layout) and inline; FPS, latency and stage means per run. Run this copy of the
script from another checkout (its tools/bench/, PYTHONPATH set to it) to measure that code; with
--rounds 0 it runs the pipeline part only, which needs nothing of this change.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import pickle
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from edge_sdk.core.geometry import InputGeometry  # noqa: E402
from edge_sdk.core.opencv import import_cv2  # noqa: E402
from edge_sdk.core.preprocess import PreprocessSpec, frame_feed, input_geometry  # noqa: E402
from edge_sdk.core.results import FrameMeta  # noqa: E402
from edge_sdk.engines.cache import EngineCache  # noqa: E402
from edge_sdk.pipeline.config import PipelineConfig, load_pipeline  # noqa: E402
from edge_sdk.pipeline.engine_setup import prepare_models  # noqa: E402
from edge_sdk.pipeline.message_socket import (  # noqa: E402
    MessageListener,
    MessageSender,
    abstract_address,
    listening_socket,
)
from edge_sdk.pipeline.messages import InferenceDone  # noqa: E402
from edge_sdk.pipeline.run import run_pipeline  # noqa: E402
from edge_sdk.postprocess import AnyPostprocessSpec, build_postprocessor  # noqa: E402
from edge_sdk.postprocess.yolo import YoloSpec  # noqa: E402
from edge_sdk.profiles import ProfileCatalog  # noqa: E402
from tools.harness.onnx_models import make_model  # noqa: E402

DEMO = REPO / "pipelines" / "demo.yaml"
DEMO_VIDEO = REPO / "build" / "demo" / "demo.mp4"
VARIANTS = ("old", "new")


@dataclass(frozen=True)
class RawOutputsDone:
    """The message inference workers sent before issue 11 (messages.InferenceDone then): one frame's
    raw engine outputs, decoded by the output stage."""

    source_index: int
    slot: int
    holder: int
    frame: FrameMeta
    captured_at: float
    geometry: InputGeometry
    outputs: dict[str, np.ndarray]
    timings_ms: dict[str, float]


@dataclass(frozen=True)
class Case:
    name: str
    spec: AnyPostprocessSpec
    outputs: dict[str, np.ndarray]
    """One frame's outputs, batch axis removed."""
    frame: FrameMeta
    geometry: InputGeometry


def demo_case(name: str, decode: str, profile_name: str, scratch: Path) -> Case:
    """The demo detector's outputs on a frame of the demo video (or the astronaut photo)."""
    loaded = load_pipeline(DEMO)
    spec = loaded.postprocess.model_copy(
        update={"decode": decode, "decode_model": loaded.model.path if decode == "sdk" else None}
    )
    config = PipelineConfig.model_validate(loaded.model_dump() | {"postprocess": spec, "sinks": []})
    config._base_dir = loaded.base_dir
    profile = ProfileCatalog(REPO / "device_profiles").load(profile_name)
    models = prepare_models(config, profile, EngineCache(scratch))
    image = demo_frame()
    feed = frame_feed(models.preprocess, models.engine_input)
    with models.primary.open() as runner:
        outputs = runner.infer({models.input_name: feed(image)})
    height, width = image.shape[:2]
    frame = FrameMeta("demo", 0, time.time(), width, height)
    one = {key: np.array(value[0]) for key, value in outputs.items()}
    return Case(name, spec, one, frame, feed.geometry(width, height))


def demo_frame() -> np.ndarray:
    cv2 = import_cv2()
    if DEMO_VIDEO.exists():
        capture = cv2.VideoCapture(str(DEMO_VIDEO))
        capture.set(cv2.CAP_PROP_POS_FRAMES, 150)
        ok, image = capture.read()
        capture.release()
        if ok:
            return np.asarray(image)
    return cv2.resize(cv2.imread(str(REPO / "tools" / "assets" / "astronaut.jpg")), (640, 480))


def yolo_case(objects: int = 6, anchors_per_object: int = 40, seed: int = 0) -> Case:
    """A YOLOv8-640 head for a 640x480 frame letterboxed to 640x640: [84, 8400] float32."""
    rng = np.random.default_rng(seed)
    classes, anchors = 80, 8400
    head = np.empty((4 + classes, anchors), np.float32)
    head[0] = rng.uniform(0, 640, anchors)
    head[1] = rng.uniform(80, 560, anchors)
    head[2:4] = rng.uniform(4, 120, (2, anchors))
    head[4:] = rng.uniform(0.0, 0.02, (classes, anchors))  # background: far under the 0.25 threshold
    for _ in range(objects):
        centre, size = rng.uniform([100, 150], [540, 490]), rng.uniform([40, 60], [200, 300])
        cluster = rng.choice(anchors, anchors_per_object, replace=False)
        head[0:2, cluster] = (centre[:, None] + rng.normal(0, 4, (2, anchors_per_object))).astype(np.float32)
        head[2:4, cluster] = (size[:, None] * rng.uniform(0.9, 1.1, (2, anchors_per_object))).astype(np.float32)
        head[4 + int(rng.integers(classes)), cluster] = rng.uniform(0.3, 0.9, anchors_per_object)
    spec = YoloSpec(type="yolo")
    geometry = input_geometry(PreprocessSpec(resize=(640, 640), resize_mode="letterbox"), 640, 480)
    return Case(
        "YOLOv8-640 head (numpy)", spec, {"output0": head}, FrameMeta("cam", 0, time.time(), 640, 480), geometry
    )


def send_frames(address: str, case: Case, variant: str, frames: int, ready: Any, start: Any, report: Any) -> None:
    """The inference worker's side: one message per frame, as fast as the channel takes them."""
    postprocess = build_postprocessor(case.spec)
    sender = MessageSender(address, give_up=lambda: True)
    timings = {"preprocess": 0.1, "infer": 20.0, "batch": 1.0}
    ready.set()
    start.wait()
    cpu, wall = time.process_time(), time.perf_counter()
    for seq in range(frames):
        frame = FrameMeta(case.frame.source, seq, case.frame.timestamp, case.frame.width, case.frame.height)
        message: Any
        if variant == "old":
            outputs = {name: np.array(value) for name, value in case.outputs.items()}
            message = RawOutputsDone(0, seq % 8, 1000, frame, 0.0, case.geometry, outputs, timings)
        else:
            result = postprocess(case.outputs, frame, case.geometry)
            message = InferenceDone(0, seq % 8, 1000, frame, 0.0, result)
        if not sender.send(message):
            raise SystemExit("the receiver went away")
    sender.close()
    report.put((time.process_time() - cpu, time.perf_counter() - wall))


def run_round(case: Case, variant: str, frames: int) -> dict[str, float]:
    ctx = mp.get_context("spawn")
    address = abstract_address(f"edge-sdk-bench-results-{os.getpid()}-{time.monotonic_ns()}")
    listener = MessageListener(listening_socket(address))
    ready, start, report = ctx.Event(), ctx.Event(), ctx.Queue()
    sender = ctx.Process(target=send_frames, args=(address, case, variant, frames, ready, start, report))
    sender.start()
    postprocess = build_postprocessor(case.spec)
    received, detections, size = 0, 0, 0
    if not ready.wait(120):  # the clocks start once the sender has imported and built its post-processor
        raise SystemExit("the sender did not start")
    cpu, wall = time.process_time(), time.perf_counter()
    start.set()
    while received < frames:
        for message in listener.receive(1.0):
            if variant == "old":
                result = postprocess(message.outputs, message.frame, message.geometry)
            else:
                result = message.result
            size = size or len(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))
            detections += len(result.detections)
            received += 1
        if not sender.is_alive() and sender.exitcode:
            raise SystemExit(f"the sender failed (exit {sender.exitcode})")
    receiver_cpu, seconds = time.process_time() - cpu, time.perf_counter() - wall
    sender_cpu, _sender_wall = report.get(timeout=60)
    sender.join()
    listener.close()
    return {
        "bytes": float(size + 8),  # the length header
        "sender_ms": sender_cpu * 1000 / frames,
        "receiver_ms": receiver_cpu * 1000 / frames,
        "wall_ms": seconds * 1000 / frames,
        "detections": detections / frames,
    }


def compare_channel(frames: int, rounds_per_case: int, profile: str) -> None:
    with tempfile.TemporaryDirectory(prefix="edge-sdk-bench-") as scratch:
        cases = [
            demo_case("SSD demo detector, decode: graph", "graph", profile, Path(scratch)),
            demo_case("SSD demo detector, decode: sdk", "sdk", profile, Path(scratch)),
            yolo_case(),
        ]
    print(
        f"{frames} frames per round, {rounds_per_case} rounds (old and new alternate), medians; cores: {os.cpu_count()}"
    )
    header = f"{'case':34} {'crosses the channel':22} {'bytes/msg':>10} {'sender ms':>10} {'receiver ms':>12} "
    print(header + f"{'wall ms/frame':>14} {'boxes':>6}")
    for case in cases:
        rounds: dict[str, list[dict[str, float]]] = {variant: [] for variant in VARIANTS}
        for _ in range(rounds_per_case):
            for variant in VARIANTS:
                rounds[variant].append(run_round(case, variant, frames))
        for variant in VARIANTS:
            median = {key: statistics.median(r[key] for r in rounds[variant]) for key in rounds[variant][0]}
            what = "raw outputs (old)" if variant == "old" else "Result (new)"
            print(
                f"{case.name if variant == 'old' else '':34} {what:22} {median['bytes']:>10,.0f} "
                f"{median['sender_ms']:>10.3f} {median['receiver_ms']:>12.3f} {median['wall_ms']:>14.3f} "
                f"{median['detections']:>6.1f}"
            )


def yolo_head_model(path: Path, head: np.ndarray) -> Path:
    """uint8 NHWC [N, H, W, 3] (any size) -> float32 [N, 84, 8400]: `head` for every frame."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes = [
        helper.make_node("Cast", ["frames"], ["as_float"], to=TensorProto.FLOAT),
        helper.make_node("ReduceMean", ["as_float", "all_but_batch"], ["mean"], keepdims=0),
        helper.make_node("Unsqueeze", ["mean", "two_axes"], ["mean_3d"]),
        helper.make_node("Mul", ["mean_3d", "zero"], ["nothing"]),
        helper.make_node("Add", ["nothing", "head"], ["output0"]),
    ]
    graph = helper.make_graph(
        nodes,
        "yolo_head",
        [helper.make_tensor_value_info("frames", TensorProto.UINT8, ["N", "H", "W", 3])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, ["N", *head.shape])],
        [
            numpy_helper.from_array(np.array([1, 2, 3], np.int64), "all_but_batch"),
            numpy_helper.from_array(np.array([1, 2], np.int64), "two_axes"),
            numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
            numpy_helper.from_array(head[np.newaxis], "head"),
        ],
    )
    onnx.save(make_model(graph), str(path))
    return path


def run_yolo_pipeline(runs: int, profile_name: str) -> None:
    profile = ProfileCatalog(REPO / "device_profiles").load(profile_name)
    with tempfile.TemporaryDirectory(prefix="edge-sdk-bench-") as scratch:
        folder = Path(scratch)
        model = yolo_head_model(folder / "yolo_head.onnx", yolo_case().outputs["output0"])
        cache = EngineCache(folder / "cache")
        for mode in ("processes", "inline"):
            config = PipelineConfig.model_validate(
                {
                    "name": "yolo-head",
                    "model": {"path": str(model)},
                    "preprocess": {"fold": False},
                    "sources": [{"uri": str(DEMO_VIDEO), "name": "demo"}],
                    "postprocess": {"type": "yolo"},
                    "sinks": [{"type": "jsonl", "path": str(folder / f"{mode}.jsonl")}],
                    "runtime": {"mode": mode},
                }
            )
            summaries = [run_pipeline(config, profile, cache) for _ in range(runs)]
            for i, s in enumerate(summaries, 1):
                stages = ", ".join(f"{k} {v:.1f}" for k, v in s.stage_mean_ms.items() if k != "total")
                print(
                    f"YOLOv8-640-head pipeline, runtime {mode} run {i}: {s.frames} frames, {s.fps:.1f} FPS, "
                    f"p50 {s.latency_p50_ms:.1f} ms, p99 {s.latency_p99_ms:.1f} ms (mean ms: {stages})"
                )
            print(
                f"YOLOv8-640-head pipeline, runtime {mode} median: {statistics.median(s.fps for s in summaries):.1f} FPS, "
                f"p50 {statistics.median(s.latency_p50_ms for s in summaries):.1f} ms"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pipeline-runs", type=int, default=3)
    parser.add_argument("--profile", default="x86-cpu")
    args = parser.parse_args()
    if not DEMO_VIDEO.exists():
        raise SystemExit(f"{DEMO_VIDEO} is missing: make demo (or python tools/make_demo_video.py {DEMO_VIDEO})")
    if args.rounds:
        compare_channel(args.frames, args.rounds, args.profile)
    if args.pipeline_runs:
        run_yolo_pipeline(args.pipeline_runs, args.profile)


if __name__ == "__main__":
    main()
