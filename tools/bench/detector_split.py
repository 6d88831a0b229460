"""The demo detector whole vs split after its box head (postprocess decode: sdk), side by side in one run.

Usage: python tools/bench/detector_split.py [--profiles x86-cpu] [--batches 1,4,8] [--seconds 3] [--rounds 3]
       [--video build/demo/demo.mp4] [--pipeline-runs 1] [--json PATH]

Both engines are what `prepare_models` builds for pipelines/demo.yaml on each profile (preprocessing
folded, raw 640x480 BGR frames in; throw-away cache, equivalence gate included): "full" keeps TF's
post-processing in the graph (decode: graph), "split" ends at the raw box encodings and class scores
and the SDK decodes them on the host (decode: sdk). Printed:

1. Equivalence on every frame of the demo video, engine by engine (batch 1): detections of each at
   the pipeline's threshold (0.5) and at 0.01 (nearly all the graph's 100 per frame), the split's
   matched to the full's (same label, IoU >= 0.9, greedy by score): counts, matched share, the lowest
   IoU of a match, the largest score difference. Targets: counts within 1%, >= 99% matched, scores
   within 1e-3.
2. Throughput per profile and batch: items/s of one engine call on a batch plus the post-processing
   of each of its frames (the decode + NMS for the split), rounds alternating between the two
   engines, median of rounds; split / full. With several profiles, each row's ratio to the best full
   CPU (first profile) rate.
3. The demo pipeline itself (300 frames, JSONL sink) on the first profile, inline and multi-process,
   full vs split, --pipeline-runs times (0 skips it).

Every figure also goes to $OUT/detector_split.json (when OUT is set) and to --json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from edge_sdk.backends.int8.accuracy import match_boxes  # noqa: E402
from edge_sdk.backends.int8.box_match import iou  # noqa: E402
from edge_sdk.core.opencv import import_cv2  # noqa: E402
from edge_sdk.core.preprocess import frame_feed  # noqa: E402
from edge_sdk.core.results import Detection, FrameMeta  # noqa: E402
from edge_sdk.engines.cache import EngineCache  # noqa: E402
from edge_sdk.pipeline.config import PipelineConfig, load_pipeline  # noqa: E402
from edge_sdk.pipeline.engine_setup import PreparedModels, prepare_models  # noqa: E402
from edge_sdk.pipeline.run import run_pipeline  # noqa: E402
from edge_sdk.postprocess import Postprocessor, build_postprocessor  # noqa: E402
from edge_sdk.profiles import ProfileCatalog  # noqa: E402

DEMO = REPO / "pipelines" / "demo.yaml"
VARIANTS = ("full", "split")


def demo_config(decode: str, video: Path, out: Path, runtime: dict[str, Any] | None = None) -> PipelineConfig:
    """pipelines/demo.yaml on `video`, a JSONL sink in `out`, post-processing decoded in the graph or by the SDK."""
    loaded = load_pipeline(DEMO)
    spec = loaded.postprocess.model_copy(
        update={"decode": decode, "decode_model": loaded.model.path if decode == "sdk" else None}
    )
    source = loaded.sources[0].model_copy(update={"uri": str(video)})
    sinks = [{"type": "jsonl", "path": str(out / f"{decode}.jsonl")}]
    config = PipelineConfig.model_validate(
        loaded.model_dump() | {"postprocess": spec, "sources": [source], "sinks": sinks, "runtime": runtime or {}}
    )
    config._base_dir = loaded.base_dir
    return config


def read_frames(video: Path) -> list[np.ndarray]:
    capture = import_cv2().VideoCapture(str(video))
    frames = []
    while (read := capture.read())[0]:
        frames.append(read[1])
    if not frames:
        raise SystemExit(f"{video} has no frames")
    return frames


class Detector:
    """One engine of the pipeline, open, with the pipeline's feed and post-processing."""

    def __init__(self, models: PreparedModels, config: PipelineConfig, threshold: float | None = None):
        self.models = models
        self.runner = models.primary.open(share_cpu=True)  # as inference workers open it: idle threads do not spin
        self.runner.activate()
        self.feed = frame_feed(models.preprocess, models.engine_input)
        spec = (
            config.postprocess
            if threshold is None
            else config.postprocess.model_copy(update={"score_threshold": threshold})
        )
        self.post: Postprocessor = build_postprocessor(spec)

    def outputs(self, batch: np.ndarray) -> dict[str, np.ndarray]:
        return self.runner.infer({self.models.input_name: batch})

    def detections(self, frame: np.ndarray, index: int, post: Postprocessor | None = None) -> tuple[Detection, ...]:
        outputs = self.outputs(self.feed(frame))
        return self.decode(outputs, 0, frame, index, post)

    def decode(
        self, outputs: dict[str, np.ndarray], row: int, frame: np.ndarray, index: int, post: Postprocessor | None = None
    ) -> tuple[Detection, ...]:
        height, width = frame.shape[:2]
        meta = FrameMeta("demo", index, 0.0, width, height)
        one = {name: value[row] for name, value in outputs.items()}
        return (post or self.post)(one, meta, self.feed.geometry(width, height)).detections

    def close(self) -> None:
        self.runner.deactivate()


def equivalence(
    detectors: dict[str, Detector], config: PipelineConfig, frames: list[np.ndarray]
) -> list[dict[str, Any]]:
    rows = []
    for threshold in (config.postprocess.score_threshold, 0.01):
        posts = {
            name: build_postprocessor(d.post.spec.model_copy(update={"score_threshold": threshold}))  # type: ignore[attr-defined]
            for name, d in detectors.items()
        }
        counts = dict.fromkeys(VARIANTS, 0)
        matched, lowest_iou, largest_drift = 0, 1.0, 0.0
        for index, frame in enumerate(frames):
            found = {name: d.detections(frame, index, posts[name]) for name, d in detectors.items()}
            for name in VARIANTS:
                counts[name] += len(found[name])
            pairs = match_boxes(found["full"], found["split"], 0.9)
            matched += len(pairs)
            for i, j in pairs:
                lowest_iou = min(lowest_iou, iou(found["full"][i], found["split"][j]))
                largest_drift = max(largest_drift, abs(found["full"][i].score - found["split"][j].score))
        share = matched / counts["full"] if counts["full"] else 1.0
        count_change = (counts["split"] - counts["full"]) / counts["full"] if counts["full"] else 0.0
        row = {
            "threshold": threshold,
            "frames": len(frames),
            "full": counts["full"],
            "split": counts["split"],
            "count_change": count_change,
            "matched": share,
            "lowest_iou": lowest_iou,
            "largest_score_difference": largest_drift,
            "passed": abs(count_change) <= 0.01 and share >= 0.99 and largest_drift <= 1e-3,
        }
        rows.append(row)
        print(
            f"   score >= {threshold:<4g}: full {counts['full']:5d}, split {counts['split']:5d} ({count_change:+.2%}), "
            f"matched IoU >= 0.9 {share:.2%}, lowest IoU {lowest_iou:.6f}, largest score difference "
            f"{largest_drift:.2e}  {'PASS' if row['passed'] else 'FAIL'}"
        )
    return rows


def throughput(
    detectors: dict[str, Detector], frames: list[np.ndarray], batch: int, seconds: float, rounds: int
) -> dict[str, dict[str, Any]]:
    """items/s and CPU ms per item of one call on `batch` frames plus their post-processing.

    The variants take turns in short slices (`seconds` / 8 each, the first of each pair alternating),
    so both see the same machine load; a slice's rate, the ratio within each pair, and the process's
    CPU time per item (all threads: less sensitive to other load than wall time) are reported."""
    names = list(detectors)
    tensors = {
        name: np.concatenate([d.feed(frames[i % len(frames)]) for i in range(batch)]) for name, d in detectors.items()
    }
    for name, d in detectors.items():  # warm-up: first calls pick kernels and allocate
        for _ in range(2):
            d.outputs(tensors[name])
    slice_seconds = seconds / 8
    rates: dict[str, list[float]] = {name: [] for name in names}
    cpu_ms: dict[str, list[float]] = {name: [] for name in names}
    post_ms: dict[str, list[float]] = {name: [] for name in names}
    ratios: list[float] = []
    for pair in range(8 * rounds):
        measured: dict[str, float] = {}
        for name in names if pair % 2 == 0 else names[::-1]:
            d = detectors[name]
            items, post_seconds = 0, 0.0
            cpu_started, started = time.process_time(), time.perf_counter()
            while time.perf_counter() - started < slice_seconds:
                outputs = d.outputs(tensors[name])
                post_started = time.perf_counter()
                for row in range(batch):
                    d.decode(outputs, row, frames[row % len(frames)], row)
                post_seconds += time.perf_counter() - post_started
                items += batch
            measured[name] = items / (time.perf_counter() - started)
            rates[name].append(measured[name])
            cpu_ms[name].append((time.process_time() - cpu_started) / items * 1000)
            post_ms[name].append(post_seconds / items * 1000)
        ratios.append(measured[names[-1]] / measured[names[0]])
    result: dict[str, dict[str, Any]] = {
        name: {
            "items_per_s": statistics.median(rates[name]),
            "engine_items_per_s": 1.0
            / max(1.0 / statistics.median(rates[name]) - statistics.median(post_ms[name]) / 1000, 1e-9),
            "cpu_ms_per_item": statistics.median(cpu_ms[name]),
            "post_ms": statistics.median(post_ms[name]),
            "slices": len(rates[name]),
        }
        for name in names
    }
    result["pairs"] = {"ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios)}
    return result


def pipelines(video: Path, out: Path, cache: EngineCache, profile: Any, runs: int) -> list[dict[str, Any]]:
    rows = []
    for mode in ("inline", "processes"):
        fps: dict[str, list[float]] = {name: [] for name in VARIANTS}
        found: dict[str, int] = {}
        for _ in range(runs):
            for name, decode in zip(VARIANTS, ("graph", "sdk"), strict=True):
                summary = run_pipeline(demo_config(decode, video, out, {"mode": mode}), profile, cache)
                fps[name].append(summary.fps)
                with open(out / f"{decode}.jsonl", encoding="utf-8") as results:
                    found[name] = sum(len(json.loads(line)["detections"]) for line in results)
        full, split = statistics.median(fps["full"]), statistics.median(fps["split"])
        rows.append({"mode": mode, "full_fps": full, "split_fps": split, "rounds": fps, "detections": found})
        print(
            f"   {mode:9s}: full {full:6.1f} FPS, split {split:6.1f} FPS, x{split / full:.2f}   rounds "
            f"{ {k: [round(v, 1) for v in vs] for k, vs in fps.items()} }; detections {found}"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profiles", default="x86-cpu", help="comma-separated; the first one is the CPU reference")
    parser.add_argument("--batches", default="1,4,8")
    parser.add_argument("--seconds", type=float, default=3.0, help="per variant, batch and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--video", type=Path, default=REPO / "build" / "demo" / "demo.mp4")
    parser.add_argument("--equivalence-frames", type=int, default=0, help="0 = every frame of the video")
    parser.add_argument("--pipeline-runs", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if not args.video.exists():  # a fresh checkout (build/ is not in git): make it as `make demo` does
        sys.path.insert(0, str(REPO / "tools"))
        from make_demo_video import write_demo_video

        print(f"{args.video} is missing: writing it (tools/make_demo_video.py)")
        write_demo_video(args.video)
    frames = read_frames(args.video)
    catalog = ProfileCatalog(REPO / "device_profiles")
    batches = [int(b) for b in args.batches.split(",")]
    report: dict[str, Any] = {"cores": os.cpu_count(), "video": str(args.video), "frames": len(frames), "profiles": {}}
    print(f"machine: {os.cpu_count()} cores; video {args.video.name} ({len(frames)} frames); batches {batches}")
    reference_rate: float | None = None
    with tempfile.TemporaryDirectory(prefix="edge-sdk-split-") as scratch:
        out, cache = Path(scratch), EngineCache(Path(scratch) / "cache")
        for profile_name in args.profiles.split(","):
            section: dict[str, Any] = {}
            report["profiles"][profile_name] = section
            try:
                profile = catalog.load(profile_name)
                configs = {
                    name: demo_config(d, args.video, out) for name, d in zip(VARIANTS, ("graph", "sdk"), strict=True)
                }
                started = time.perf_counter()
                detectors = {name: Detector(prepare_models(c, profile, cache), c) for name, c in configs.items()}
                print(f"\n== profile {profile_name}: engines ready in {time.perf_counter() - started:.1f} s")
                for name, d in detectors.items():
                    gate = d.models.primary.gate
                    print(f"   {name}: {gate.line() if gate else 'no gate verdict'}")
            except Exception as exc:  # one profile that cannot run here must not stop the others
                print(f"   profile {profile_name}: {type(exc).__name__}: {exc}")
                section["error"] = f"{type(exc).__name__}: {exc}"
                continue
            try:
                print("1. equivalence, split vs full, every frame at batch 1")
                limit = args.equivalence_frames or len(frames)
                section["equivalence"] = equivalence(detectors, configs["full"], frames[:limit])
            except Exception as exc:
                print(f"   equivalence: {type(exc).__name__}: {exc}")
                traceback.print_exc()
            print("2. throughput: items/s (engine call + post-processing of each frame), median of rounds")
            section["throughput"] = {}
            for batch in batches:
                try:
                    rates = throughput(detectors, frames, batch, args.seconds, args.rounds)
                except Exception as exc:
                    print(f"   batch {batch}: {type(exc).__name__}: {exc}")
                    section["throughput"][batch] = {"error": f"{type(exc).__name__}: {exc}"}
                    continue
                section["throughput"][batch] = rates
                full, split = rates["full"], rates["split"]
                ratio = (
                    f"; split = x{split['items_per_s'] / reference_rate:.2f} the CPU's best full"
                    if reference_rate
                    else ""
                )
                print(
                    f"   batch {batch:4d}: full {full['items_per_s']:8.1f}/s ({full['cpu_ms_per_item']:.2f} CPU ms/frame, post "
                    f"{full['post_ms']:.3f} ms, engine alone {full['engine_items_per_s']:.0f}/s), split "
                    f"{split['items_per_s']:8.1f}/s ({split['cpu_ms_per_item']:.2f} CPU ms/frame, decode+NMS "
                    f"{split['post_ms']:.3f} ms, engine alone {split['engine_items_per_s']:.0f}/s); split/full "
                    f"x{rates['pairs']['ratio_median']:.2f} (median of "
                    f"{full['slices']} paired slices), CPU per frame x{full['cpu_ms_per_item'] / split['cpu_ms_per_item']:.2f} less{ratio}"
                )
            best = {
                name: max((r[name]["items_per_s"] for r in section["throughput"].values() if name in r), default=0.0)
                for name in VARIANTS
            }
            section["best"] = best
            if reference_rate is None:
                reference_rate = best["full"] or None
                report["reference_full_best"] = reference_rate
            elif reference_rate:
                ratio = best["split"] / reference_rate
                section["split_vs_reference"] = ratio
                print(
                    f"   best split {best['split']:.1f}/s = x{ratio:.2f} the {args.profiles.split(',')[0]} full best "
                    f"{reference_rate:.1f}/s (target >= 10x): {'PASS' if ratio >= 10 else 'FAIL'}"
                )
            for d in detectors.values():
                d.close()
            if args.pipeline_runs and profile_name == args.profiles.split(",")[0]:
                print(f"3. the demo pipeline ({len(frames)} frames, JSONL sink), median of {args.pipeline_runs}")
                try:
                    section["pipeline"] = pipelines(args.video, out, cache, profile, args.pipeline_runs)
                except Exception as exc:
                    print(f"   pipeline: {type(exc).__name__}: {exc}")
            for target in filter(
                None, (args.json, Path(os.environ["OUT"]) / "detector_split.json" if os.environ.get("OUT") else None)
            ):
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")


if __name__ == "__main__":
    main()
