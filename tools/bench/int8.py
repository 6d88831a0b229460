"""INT8 vs FP32 through the SDK's own build path, side by side in one run.

Usage: python tools/bench/int8.py [--runs 60] [--warmup 10] [--detector-method minmax] [--detector-fallback mixed]

Each engine is what `prepare_engine` builds for the x86-cpu profile (graph passes, then ONNX Runtime;
INT8 = QDQ calibrated, gated on held-out data), in a throw-away cache. Latency runs alternate between
the FP32 and the INT8 engine so both see the same machine load; p50 of `--runs` calls after warm-up.

- ResNet-18-sized CNN (tools/harness/onnx_models.py resnet18_like, random weights, float32 [1, 3, 224, 224]),
  calibrated on crops of the astronaut photo; gate: cosine per output (generic task).
- The shipped person detector as the demo pipeline builds it (preprocessing and the 300x300 resize
  folded in, raw 640x480 BGR frames in), calibrated on the demo video; gate: matched boxes.
- The digits CNN: accuracy of both engines on all 539 held-out digits (the gate itself sees a quarter
  of the calibration file).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from edge_sdk.backends.calibration import int8_settings, make_calibration  # noqa: E402
from edge_sdk.core.model_file import ModelFile  # noqa: E402
from edge_sdk.core.opencv import import_cv2  # noqa: E402
from edge_sdk.engines.cache import EngineCache  # noqa: E402
from edge_sdk.engines.engine import PreparedEngine, prepare_engine  # noqa: E402
from edge_sdk.pipeline.config import load_pipeline  # noqa: E402
from edge_sdk.pipeline.engine_setup import pipeline_calibration, pipeline_graph  # noqa: E402
from edge_sdk.profiles import ProfileCatalog  # noqa: E402
from tools.harness.onnx_models import resnet18_like  # noqa: E402

ASTRONAUT = REPO / "tools" / "assets" / "astronaut.jpg"


def paired_p50(
    fp32: PreparedEngine, int8: PreparedEngine, feed_name: str, tensor: np.ndarray, threads: int, runs: int, warmup: int
) -> tuple[float, float]:
    with fp32.open(threads=threads) as a, int8.open(threads=threads) as b:
        feeds_a = {a.inputs[0].name if feed_name == "" else feed_name: tensor}
        feeds_b = {b.inputs[0].name if feed_name == "" else feed_name: tensor}
        for _ in range(warmup):
            a.infer(feeds_a)
            b.infer(feeds_b)
        times_a, times_b = [], []
        for _ in range(runs):
            for runner, feeds, times in ((a, feeds_a, times_a), (b, feeds_b, times_b)):
                started = time.perf_counter()
                runner.infer(feeds)
                times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times_a), statistics.median(times_b)


def astronaut_crops(count: int, size: int) -> np.ndarray:
    """float32 NCHW crops scaled to 0..1 with ImageNet-style normalisation."""
    cv2 = import_cv2()
    image = cv2.cvtColor(cv2.imread(str(ASTRONAUT)), cv2.COLOR_BGR2RGB)
    rng = np.random.default_rng(0)
    crops = []
    for _ in range(count):
        side = int(rng.integers(160, image.shape[0]))
        y, x = (int(rng.integers(0, image.shape[i] - side + 1)) for i in (0, 1))
        crop = cv2.resize(image[y : y + side, x : x + side], (size, size)).astype(np.float32) / 255
        crops.append(((crop - (0.485, 0.456, 0.406)) / (0.229, 0.224, 0.225)).transpose(2, 0, 1))
    return np.stack(crops).astype(np.float32)


def accuracy_line(prepared: PreparedEngine) -> str:
    int8 = prepared.entry.manifest["facts"].get("int8", {})
    report = int8.get("accuracy", {})
    parts = [
        f"{key}={value:.4f}" if isinstance(value, float) else f"{key}={value}"
        for key, value in report.items()
        if value is not None and not isinstance(value, list | dict)
    ]
    if report.get("matched_boxes") is None:
        parts += [f"{o['name']} cosine {o['cosine']:.4f}" for o in report.get("outputs", [])]
    return ", ".join([*parts, f"layers kept in float: {len(int8.get('excluded_nodes', []))}"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--detector-method", default="minmax", choices=["minmax", "entropy", "percentile"])
    parser.add_argument("--detector-fallback", default="mixed", choices=["none", "mixed"])
    args = parser.parse_args()
    profile = ProfileCatalog().load("x86-cpu")
    rows: list[str] = []
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="int8-bench-") as scratch_name:
        scratch = Path(scratch_name)
        cache = EngineCache(scratch / "cache")

        # ResNet-18-sized CNN
        resnet = ModelFile.load(resnet18_like(scratch / "resnet18_like.onnx"))
        np.savez(scratch / "resnet_calib.npz", **{resnet.inputs[0].name: astronaut_crops(64, 224)})
        started = time.perf_counter()
        calibration = make_calibration(scratch / "resnet_calib.npz", resnet, int8_settings(profile.int8), "generic")
        resnet_fp32 = prepare_engine(resnet, profile, "fp32", cache)
        resnet_int8 = prepare_engine(resnet, profile, "int8", cache, calibration=calibration)
        notes.append(f"ResNet int8 build {time.perf_counter() - started:.0f} s; gate: {accuracy_line(resnet_int8)}")
        tensor = astronaut_crops(1, 224)
        for threads in (1, 2):
            a, b = paired_p50(resnet_fp32, resnet_int8, "", tensor, threads, args.runs, args.warmup)
            rows.append(f"| ResNet-18-sized CNN, 224x224 | {threads} | {a:.2f} | {b:.2f} | **{a / b:.2f}x** |")

        # Person detector, as the demo pipeline builds it
        video = scratch / "demo.mp4"
        subprocess.run([sys.executable, str(REPO / "tools" / "make_demo_video.py"), str(video)], check=True)
        config = load_pipeline(REPO / "pipelines" / "demo.yaml")
        detector = ModelFile.load(config.model.path)
        started = time.perf_counter()
        calibration = pipeline_calibration(
            config, detector, profile, video, method=args.detector_method, fallback=args.detector_fallback
        )
        graph = pipeline_graph(config, detector)
        detector_fp32 = prepare_engine(detector, profile, "fp32", cache, graph=graph)
        try:
            detector_int8 = prepare_engine(detector, profile, "int8", cache, graph=graph, calibration=calibration)
        except Exception as exc:  # the gate refusing is a result worth printing, not a crash
            notes.append(f"detector int8 ({args.detector_method}, fallback {args.detector_fallback}) refused: {exc}")
            detector_int8 = None
        if detector_int8 is not None:
            notes.append(
                f"detector int8 ({args.detector_method}, fallback {args.detector_fallback}) build "
                f"{time.perf_counter() - started:.0f} s; "
                f"gate: {accuracy_line(detector_int8)}"
            )
            cv2 = import_cv2()
            frame = cv2.resize(cv2.imread(str(ASTRONAUT)), (640, 480))[np.newaxis]
            for threads in (1, 2):
                a, b = paired_p50(detector_fp32, detector_int8, "", frame, threads, args.runs, args.warmup)
                rows.append(f"| person detector, 640x480 frame in | {threads} | {a:.2f} | {b:.2f} | **{a / b:.2f}x** |")

        # Digits accuracy on the whole held-out set
        digits = ModelFile.load(REPO / "models" / "digits_cnn.onnx")
        calibration = make_calibration(REPO / "models" / "digits_calibration.npz", digits, int8_settings(profile.int8))
        holdout = np.load(REPO / "models" / "digits_holdout.npz")
        images, labels = holdout["image"], holdout["labels"]
        correct = {}
        for precision in ("fp32", "int8"):
            prepared = prepare_engine(digits, profile, precision, cache, calibration=calibration)
            with prepared.open(threads=1) as runner:
                logits = runner.infer({"image": images})["logits"]
            correct[precision] = int((logits.argmax(axis=1) == labels).sum())
        total = len(labels)
        drop = (correct["fp32"] - correct["int8"]) * 100 / total
        notes.append(
            f"digits held-out accuracy: FP32 {correct['fp32']}/{total} ({correct['fp32'] * 100 / total:.2f}%), "
            f"INT8 {correct['int8']}/{total} ({correct['int8'] * 100 / total:.2f}%), drop {drop:.2f} points"
        )
    print("| model | threads | FP32 p50 ms | INT8 p50 ms | speed-up |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))
    print()
    print("\n".join(f"- {note}" for note in notes))


if __name__ == "__main__":
    main()
