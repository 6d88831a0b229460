"""INT8 against FP32 on the shipped person detector: latency ratio and the detection metric, side by side in one run.

Usage (from the repository root of a checkout: it runs the SDK's own quantiser, recipe and box
matching, so the SDK's requirements must be installed, as `make test` or tools/gpu/suite.sh do):

    PYTHONPATH=. python tools/bench/int8_detector.py [--threads 1,2] [--runs 60] [--warmup 10] [--json OUT]

What it does, as `edge-sdk build models/ssdlite_mobilenet_v2_person.onnx --precision int8 --calib
build/demo/demo.mp4` does (README, docs/int8.md), through the same functions
(edge_sdk/backends/onnxruntime/quantize.py, default Int8Settings):

- the demo video (tools/make_demo_video.py writes it to build/demo/demo.mp4 when it is missing): its
  first 200 frames, raw 640x480 BGR frames into the model's uint8 input; every 4th held out to measure,
  the other 150 calibrate (MinMax);
- QDQ, uint8 activations, int8 per-channel weights (7-bit weights on x86 without VNNI), in two recipes:
  `plain` (every quantisable node in 8 bits) and `detector` (the SDK's default for detectors,
  edge_sdk/backends/int8/recipe.py: the stem and the post-processing after the last weighted layer
  stay float);
- accuracy on the 50 held-out frames with the SDK's detection metric (edge_sdk/backends/int8/box_match.py):
  of FP32's N boxes at score >= 0.5, how many INT8 found (IoU >= 0.5, same class, score >= 0.45), and
  INT8's own boxes with none in FP32;
- latency: p50 of `--runs` calls per engine and thread count, the FP32 and INT8 calls alternating so
  both see the same machine load; the ratio FP32 / INT8 is the speed-up.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import onnx
import onnxruntime as ort

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from edge_sdk.backends.calibration.settings import Int8Settings  # noqa: E402
from edge_sdk.backends.int8.box_match import BoxMatch, FrameBoxes, count_boxes  # noqa: E402
from edge_sdk.backends.int8.recipe import stem_nodes, tail_nodes  # noqa: E402
from edge_sdk.backends.onnxruntime.quantize import (  # noqa: E402
    calibrate,
    prepare_for_quantization,
    quantize_with_ranges,
    resolve_reduce_range,
)
from edge_sdk.core.host import HostProbe  # noqa: E402
from edge_sdk.core.results import Detection  # noqa: E402

MODEL = REPO / "models" / "ssdlite_mobilenet_v2_person.onnx"
VIDEO = Path("build") / "demo" / "demo.mp4"  # relative to where it runs: the repository root
MAX_SAMPLES, HOLDOUT_EVERY = 200, 4
RULE = BoxMatch(iou_threshold=0.5, score_threshold=0.5, lenient_threshold=0.45)
VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")
INPUT = "image_tensor:0"


def read_frames(video: Path) -> list[np.ndarray]:
    capture = cv2.VideoCapture(str(video))
    frames: list[np.ndarray] = []
    while len(frames) < MAX_SAMPLES:
        ok, frame = capture.read()
        if not ok:
            break
        frames.append(frame)
    capture.release()
    if len(frames) < HOLDOUT_EVERY:
        raise SystemExit(f"{video}: expected at least {HOLDOUT_EVERY} frames, got {len(frames)}")
    return frames


def session(model: Path, threads: int) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])


def decode(outputs: list[np.ndarray], names: list[str], threshold: float) -> list[Detection]:
    """TF Object Detection API outputs (normalised ymin, xmin, ymax, xmax) as boxes scoring >= threshold."""
    by_name = dict(zip(names, outputs, strict=True))
    count = int(by_name["num_detections:0"][0])
    boxes, scores = by_name["detection_boxes:0"][0][:count], by_name["detection_scores:0"][0][:count]
    classes = by_name["detection_classes:0"][0][:count]
    return [
        Detection(float(b[1]), float(b[0]), float(b[3]), float(b[2]), float(s), int(c), str(int(c)))
        for b, s, c in zip(boxes, scores, classes, strict=True)
        if s >= threshold
    ]


def accuracy(reference: Path, candidate: Path, held_out: list[np.ndarray]) -> dict[str, Any]:
    a, b = session(reference, 1), session(candidate, 1)
    names = [output.name for output in a.get_outputs()]
    frames = []
    for frame in held_out:
        feed = {INPUT: frame[np.newaxis]}
        ref, cand = a.run(names, feed), b.run(names, feed)
        frames.append(
            FrameBoxes(
                decode(ref, names, RULE.score_threshold),
                decode(ref, names, RULE.lenient_threshold),
                decode(cand, names, RULE.score_threshold),
                decode(cand, names, RULE.lenient_threshold),
            )
        )
    counts = count_boxes(frames, RULE)
    return {
        "reference_boxes": counts.reference,
        "matched": counts.matched,
        "candidate_boxes": counts.candidate,
        "extra": counts.extra,
        "matched_share": counts.matched_share,
        "extra_share": counts.extra_share,
        "score_drift": counts.score_drift,
    }


def paired_p50(models: dict[str, Path], frame: np.ndarray, threads: int, runs: int, warmup: int) -> dict[str, float]:
    sessions = {name: session(path, threads) for name, path in models.items()}
    feed = {INPUT: frame[np.newaxis]}
    for _ in range(warmup):
        for s in sessions.values():
            s.run(None, feed)
    times: dict[str, list[float]] = {name: [] for name in sessions}
    for _ in range(runs):
        for name, s in sessions.items():
            started = time.perf_counter()
            s.run(None, feed)
            times[name].append((time.perf_counter() - started) * 1000)
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="1,2", help="Comma-separated intra-op thread counts.")
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--video", type=Path, default=VIDEO, help="Made by tools/make_demo_video.py if missing.")
    parser.add_argument("--json", type=Path, help="Also write the figures here as JSON.")
    args = parser.parse_args()
    threads = [int(t) for t in args.threads.split(",") if t.strip()]
    if not args.video.is_file():
        subprocess.run([sys.executable, str(REPO / "tools" / "make_demo_video.py"), str(args.video)], check=True)
    frames = read_frames(args.video)
    held_out = [f for i, f in enumerate(frames) if i % HOLDOUT_EVERY == HOLDOUT_EVERY - 1]
    calibration = [f for i, f in enumerate(frames) if i % HOLDOUT_EVERY != HOLDOUT_EVERY - 1]
    host = HostProbe().facts()
    vnni = sorted(host.cpu_flags.intersection(VNNI_FLAGS))
    settings = Int8Settings()  # what `edge-sdk build --precision int8` uses by default: MinMax, QDQ, per channel
    reduce_range = resolve_reduce_range(settings)
    print(
        f"host: {(host.cpu_model or platform.machine())}, {os.cpu_count()} CPUs, VNNI: {', '.join(vnni) or 'no'}; onnxruntime {ort.__version__}; "
        f"{'7-bit' if reduce_range else '8-bit'} weights"
    )
    print(f"data: {args.video}, {len(calibration)} calibration + {len(held_out)} held-out frames")
    with tempfile.TemporaryDirectory(prefix="int8-detector-") as scratch_name:
        scratch = Path(scratch_name)
        prepared = prepare_for_quantization(MODEL, scratch / "prepared.onnx")
        graph = onnx.load(str(prepared))
        recipe = list(dict.fromkeys([*stem_nodes(graph), *tail_nodes(graph)]))
        started = time.perf_counter()
        ranges = calibrate(prepared, ({INPUT: frame[np.newaxis]} for frame in calibration), settings)

        def quantize(name: str, exclude: list[str]) -> Path:
            path = scratch / f"{name}.onnx"
            onnx.save(quantize_with_ranges(prepared, ranges, settings, exclude), str(path))
            return path

        models = {"fp32": prepared, "int8 plain": quantize("plain", []), "int8 detector": quantize("detector", recipe)}
        print(
            f"quantised both recipes in {time.perf_counter() - started:.1f} s ({len(recipe)} nodes float in 'detector')"
        )
        figures: dict[str, Any] = {
            "host": (host.cpu_model or platform.machine()),
            "vnni": vnni,
            "onnxruntime": ort.__version__,
            "rows": [],
        }
        latency = {t: paired_p50(models, frames[0], t, args.runs, args.warmup) for t in threads}
        print()
        print("| engine | " + " | ".join(f"p50 ms, {t} thr" for t in threads) + " | FP32/INT8 | matched boxes |")
        print("|---|" + "---|" * len(threads) + "---|---|")
        for name, path in models.items():
            row: dict[str, Any] = {"engine": name, "p50_ms": {t: round(latency[t][name], 3) for t in threads}}
            ratio = " / ".join(f"{latency[t]['fp32'] / latency[t][name]:.2f}x" for t in threads)
            if name == "fp32":
                metric = "(reference)"
            else:
                acc = accuracy(prepared, path, held_out)
                row["accuracy"] = acc
                metric = (
                    f"{acc['matched_share']:.2%}: of FP32's {acc['reference_boxes']} boxes INT8 found {acc['matched']}; "
                    f"INT8 had {acc['candidate_boxes']}, {acc['extra']} not in FP32; score drift {acc['score_drift']:.4f}"
                )
            row["speedup"] = {t: round(latency[t]["fp32"] / latency[t][name], 3) for t in threads}
            figures["rows"].append(row)
            cells = " | ".join(f"{latency[t][name]:.2f}" for t in threads)
            print(f"| {name} | {cells} | {ratio} | {metric} |")
    passes = {r["engine"]: r["accuracy"]["matched_share"] >= 0.99 and r["accuracy"]["extra_share"] <= 0.01
              for r in figures["rows"] if "accuracy" in r}  # fmt: skip
    print()
    print(
        "gate (1 point, the default max-drop): "
        + ", ".join(f"{k} {'passes' if v else 'fails'}" for k, v in passes.items())
    )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
