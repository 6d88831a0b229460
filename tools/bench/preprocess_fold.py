"""Folded preprocessing vs numpy/cv2 preprocessing + unfused model, per 1080p frame, side by side.

Usage: python tools/bench/preprocess_fold.py [--runs 50] [--warmup 5] [--threads 1] [--profile x86-cpu]

The frame is tools/assets/astronaut.jpg resized to 1920x1080 (BGR, as sources deliver it). Each
engine is built by `prepare_engine` into a scratch cache (so it went through the same graph passes a
pipeline's engine does); the folded one with `GraphOptions(preprocess=spec)`. Runs alternate between
the variants so they see the same machine load. Per frame: CPU time (process time, every thread of
this process) and wall time, p50 over `--runs`. ONNX Runtime and OpenCV both get `--threads` threads.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edge_sdk.backends.runner import EngineRunner
from edge_sdk.core.opencv import import_cv2
from edge_sdk.core.preprocess import Preprocessor, PreprocessSpec
from edge_sdk.engines.cache import EngineCache
from edge_sdk.engines.engine import prepare_engine
from edge_sdk.graph.options import FRAME_INPUT, GraphOptions
from edge_sdk.profiles import DeviceProfile, ProfileCatalog

REPO = Path(__file__).resolve().parents[2]
DETECTOR = REPO / "models" / "ssdlite_mobilenet_v2_person.onnx"
IMAGENET = {"scale": 1 / 255, "mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)}


@dataclass
class Variant:
    model: str
    path: str
    runner: EngineRunner
    step: Callable[[np.ndarray], dict[str, np.ndarray]]
    """Does one frame; returns nothing useful, only times."""
    cpu_pre: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    wall: list[float] = field(default_factory=list)


def numpy_variant(model: str, path: str, runner: EngineRunner, spec: PreprocessSpec) -> Variant:
    meta = runner.inputs[0]
    preprocess = Preprocessor(spec, meta)
    variant = Variant(model, path, runner, lambda frame: {})

    def step(frame: np.ndarray) -> dict[str, np.ndarray]:
        started = time.process_time()
        tensor = preprocess(frame)
        variant.cpu_pre.append(time.process_time() - started)
        return runner.infer({meta.name: tensor})

    variant.step = step
    return variant


def folded_variant(model: str, path: str, runner: EngineRunner) -> Variant:
    return Variant(model, path, runner, lambda frame: runner.infer({FRAME_INPUT: frame[np.newaxis]}))


def engine(
    model: Path, profile: DeviceProfile, cache: EngineCache, threads: int, spec: PreprocessSpec | None
) -> EngineRunner:
    graph = GraphOptions(preprocess=spec) if spec is not None else None
    prepared = prepare_engine(model, profile, cache=cache, graph=graph)
    runner = prepared.open(threads=threads)
    runner.activate()
    return runner


def classifier_model(folder: Path) -> tuple[str, Path]:
    sys.path.insert(0, str(REPO))
    from tools.harness import onnx_models

    if hasattr(onnx_models, "resnet18_like"):
        return "ResNet-18-like 224 (float NCHW, mean/std)", onnx_models.resnet18_like(folder / "resnet18_like.onnx")
    return "float_classifier 224 (float NCHW, mean/std)", onnx_models.float_classifier(
        folder / "float_classifier.onnx", size=224
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--profile", default="x86-cpu")
    args = parser.parse_args()
    cv2 = import_cv2()
    cv2.setNumThreads(args.threads)
    frame = cv2.resize(cv2.imread(str(REPO / "tools" / "assets" / "astronaut.jpg")), (1920, 1080))
    profile = ProfileCatalog(REPO / "device_profiles").load(args.profile)
    detector_spec = PreprocessSpec(color="rgb", resize=(300, 300))
    classifier_spec = PreprocessSpec(dtype="float32", layout="nchw", color="rgb", resize=(224, 224), **IMAGENET)
    with tempfile.TemporaryDirectory(prefix="edge-sdk-bench-") as scratch:
        cache = EngineCache(Path(scratch) / "engines")
        classifier_name, classifier = classifier_model(Path(scratch))
        plain_detector = engine(DETECTOR, profile, cache, args.threads, None)
        plain_classifier = engine(classifier, profile, cache, args.threads, None)
        variants = [
            numpy_variant("SSDLite person detector", "numpy RGB, model resizes 1080p in its graph", plain_detector,
                          PreprocessSpec(color="rgb")),
            folded_variant("SSDLite person detector", "folded RGB, raw frame in, model resizes 1080p in its graph",
                           engine(DETECTOR, profile, cache, args.threads, PreprocessSpec(color="rgb"))),
            numpy_variant("SSDLite person detector", "numpy/cv2 resize 300x300 + RGB, unfused", plain_detector,
                          detector_spec),
            folded_variant("SSDLite person detector", "folded resize 300x300 + RGB, raw frame in",
                           engine(DETECTOR, profile, cache, args.threads, detector_spec)),
            numpy_variant(classifier_name, "numpy/cv2 resize + RGB + NCHW + mean/std, unfused", plain_classifier,
                          classifier_spec),
            folded_variant(classifier_name, "folded, raw frame in",
                           engine(classifier, profile, cache, args.threads, classifier_spec)),
        ]  # fmt: skip
        for _ in range(args.warmup):
            for variant in variants:
                variant.step(frame)
        for variant in variants:
            variant.cpu_pre.clear()
        for _ in range(args.runs):
            for variant in variants:
                cpu, wall = time.process_time(), time.perf_counter()
                variant.step(frame)
                variant.cpu.append(time.process_time() - cpu)
                variant.wall.append(time.perf_counter() - wall)
        for variant in variants:
            variant.runner.deactivate()
    print(f"1920x1080 BGR frame, {args.runs} runs after {args.warmup} warm-up, {args.threads} thread(s), p50 in ms\n")
    print("| model | path | preprocess CPU | total CPU | total wall | CPU vs numpy |")
    print("|---|---|---:|---:|---:|---:|")
    # The baseline of each model is its numpy path with the same resize as the folded one ("unfused").
    baseline = {v.model: statistics.median(v.cpu) for v in variants if v.path.endswith("unfused")}
    for variant in variants:
        pre = f"{statistics.median(variant.cpu_pre) * 1000:.2f}" if variant.cpu_pre else "in graph"
        cpu, wall = statistics.median(variant.cpu), statistics.median(variant.wall)
        ratio = cpu / baseline[variant.model]
        print(f"| {variant.model} | {variant.path} | {pre} | {cpu * 1000:.2f} | {wall * 1000:.2f} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
