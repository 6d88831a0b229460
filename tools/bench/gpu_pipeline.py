"""8 cameras at 1080p through the SDK's multi-process runtime vs a plain single-process loop, on one GPU.

Usage: python tools/bench/gpu_pipeline.py [--profile x86-nvidia] [--variants split,full] [--seconds 20] [--precision fp32]
       [--sources 8] [--size 1920x1080] [--capture video|synthetic] [--layouts 4x8] [--ring-slots 8]
       [--total-seconds 230] [--json PATH]

Per detector variant ("full": the demo detector with TF's post-processing and NMS Loop in the graph;
"split": the graph cut after its box head, decode + NMS on the host, postprocess decode: sdk), side
by side in one run:

- cameras (--capture): "video" (default) = each camera decodes one clip, encoded once at the given
  size (mp4v), from the start again at its end, as real cameras decode; "synthetic" = each frame is
  rendered (the SDK's pan-zoom source);
- baseline: what a user writes without the SDK: one process, one frame at a time, the N cameras
  read in turn (cv2.VideoCapture), cv2 resize to 300x300 + RGB, a plain
  onnxruntime.InferenceSession on the same model (the SDK's split for "split") with the profile's
  providers, the SDK's SSD post-processing;
- pipeline: the same cameras (as video file sources, looping; or `synthetic://` sources, realtime off)
  in pipelines/demo.yaml's set-up (preprocessing folded into the engine, raw frames in) through the
  multi-process runtime, per layout WORKERSxBATCH (inference workers x runtime.batch_size), no sinks.

Both run the same graph in the same precision (--precision, default fp32; fp16 = the SDK's float16
conversion for both).

Each phase is timed for --seconds once results flow (the pipeline after --warmup seconds of results),
with GPU utilisation sampled every --sample-ms through NVML (the nvidia-ml-py wheel's `pynvml`; 'NVML
not available' when it cannot load). Printed per phase: FPS, mean and p50 GPU utilisation; per variant
PASS/FAIL against the targets: GPU busy >= 80% of the pipeline's run, pipeline FPS >= 2x the baseline's.
Every phase is independent (an error prints one line, the run goes on); a phase starts only while
--total-seconds allows, and a watchdog ends the process 40 s after that. Results go to
$OUT/gpu_pipeline.json (when OUT is set) and to --json, rewritten after each phase.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from edge_sdk.engines.cache import EngineCache  # noqa: E402
from edge_sdk.pipeline.config import PipelineConfig, load_pipeline  # noqa: E402
from edge_sdk.pipeline.frame_ring import RingLayout  # noqa: E402
from edge_sdk.pipeline.memory_budget import HostMemory  # noqa: E402
from edge_sdk.pipeline.run import run_pipeline  # noqa: E402
from edge_sdk.pipeline.snapshot import RuntimeSnapshot  # noqa: E402
from edge_sdk.profiles import DeviceProfile, ProfileCatalog  # noqa: E402

MODEL = REPO / "models" / "ssdlite_mobilenet_v2_person.onnx"
ASTRONAUT = REPO / "tools" / "assets" / "astronaut.jpg"
DECODE = {"full": "graph", "split": "sdk"}
CAMERA_FRAMES = 600
"""Frames of each virtual camera's path before it loops (20 s at 30 FPS: the person moves and scales)."""
CLIP_FRAMES = 300
"""Frames of the encoded clip the cameras play with --capture video (10 s at 30 FPS)."""
UTIL_TARGET = 80.0
SPEED_UP_TARGET = 2.0


class Report:
    def __init__(self, path: Path | None):
        self.data: dict[str, Any] = {"phases": [], "targets": []}
        self.paths = [
            p for p in (path, Path(os.environ["OUT"]) / "gpu_pipeline.json" if os.environ.get("OUT") else None) if p
        ]

    def save(self) -> None:
        for path in self.paths:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(self.data, indent=2, default=str), encoding="utf-8")


# --- GPU utilisation ------------------------------------------------------------------------------


class GpuSampler:
    """NVML's utilization.gpu (percent of the last sample period a kernel ran) every `every` seconds, in a thread."""

    def __init__(self, device: int, every: float):
        self.every = every
        self.samples: list[tuple[float, float, float]] = []
        """(monotonic time, gpu %, memory controller %)."""
        self.problem: str | None = None
        self.name = ""
        self._stop = threading.Event()
        try:
            import pynvml  # the nvidia-ml-py wheel

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(device)
            name = pynvml.nvmlDeviceGetName(self._handle)
            self.name = name.decode() if isinstance(name, bytes) else str(name)
        except Exception as exc:  # no wheel, no driver, no GPU
            self.problem = f"{type(exc).__name__}: {exc}".strip()
            return
        self._thread = threading.Thread(target=self._run, name="nvml-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                rates = self._nvml.nvmlDeviceGetUtilizationRates(self._handle)
            except Exception as exc:
                self.problem = f"sampling failed: {exc}"
                return
            self.samples.append((time.monotonic(), float(rates.gpu), float(rates.memory)))

    def window(self, start: float, end: float) -> dict[str, Any]:
        if self.problem is not None:
            return {"gpu_util_mean": None, "gpu_util_p50": None, "samples": 0, "nvml": self.problem}
        inside = [s for s in self.samples if start <= s[0] <= end]
        if not inside:
            return {"gpu_util_mean": None, "gpu_util_p50": None, "samples": 0}
        gpu = [s[1] for s in inside]
        return {
            "gpu_util_mean": statistics.fmean(gpu),
            "gpu_util_p50": statistics.median(gpu),
            "memory_util_mean": statistics.fmean(s[2] for s in inside),
            "samples": len(inside),
        }

    def close(self) -> None:
        self._stop.set()


def util_text(window: dict[str, Any]) -> str:
    if window.get("gpu_util_mean") is None:
        return "GPU util n/a" + (f" ({window['nvml']})" if window.get("nvml") else "")
    return (
        f"GPU util mean {window['gpu_util_mean']:.1f}%, p50 {window['gpu_util_p50']:.1f}% "
        f"({window['samples']} samples), memory controller {window['memory_util_mean']:.1f}%"
    )


# --- time bounds ----------------------------------------------------------------------------------


@dataclass
class Budget:
    total: float
    started: float = field(default_factory=time.monotonic)

    def left(self) -> float:
        return self.total - (time.monotonic() - self.started)

    def allows(self, needed: float, what: str) -> bool:
        if self.left() >= needed:
            return True
        print(f"   skipped {what}: {self.left():.0f} s left of --total-seconds, it needs about {needed:.0f} s")
        return False


def start_watchdog(report: Report, seconds: float) -> None:
    def fire() -> None:
        print(f"watchdog: {seconds:.0f} s passed; saving what was measured and exiting", flush=True)
        report.data["watchdog"] = True
        report.save()
        os._exit(3)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()


# --- the plain loop -------------------------------------------------------------------------------


def plain_loop(
    variant: str, profile: DeviceProfile, args: argparse.Namespace, sampler: GpuSampler, work: Path
) -> dict[str, Any]:
    """One process, one frame at a time: render -> cv2 resize + RGB -> session.run -> SSD post-processing."""
    import onnx
    import onnxruntime as ort

    from edge_sdk.backends.onnxruntime.session import provider_list
    from edge_sdk.core.geometry import InputGeometry
    from edge_sdk.core.opencv import import_cv2
    from edge_sdk.core.results import FrameMeta
    from edge_sdk.graph.ssd_split import SsdSplit
    from edge_sdk.postprocess.ssd import SsdPostprocessor, SsdSpec

    cv2 = import_cv2()
    model = onnx.load(str(MODEL))
    if variant == "split":
        model = SsdSplit().apply(model)
    if args.precision == "fp16":  # the pipeline's fp16 engine is this graph converted to float16: run the same
        from edge_sdk.backends.onnxruntime.fp16 import convert_to_fp16

        model, _facts = convert_to_fp16(model)
    providers = provider_list(profile.engine, args.precision, work)
    session = ort.InferenceSession(model.SerializeToString(), providers=providers)
    spec = SsdSpec(type="ssd", score_threshold=0.5, labels=["person"], decode=DECODE[variant], decode_model=MODEL)
    post = SsdPostprocessor(spec if variant == "split" else spec.model_copy(update={"decode_model": None}))
    names = [o.name for o in session.get_outputs()]
    width, height = args.frame_size
    cameras = [Camera(args) for _ in range(args.sources)]
    geometry = InputGeometry(300, 300, 300 / width, 300 / height)
    frames = detections = 0

    def one(index: int) -> int:
        image = cameras[index % len(cameras)].read()
        tensor = cv2.cvtColor(cv2.resize(image, (300, 300), interpolation=cv2.INTER_LINEAR), cv2.COLOR_BGR2RGB)
        outputs = session.run(names, {"image_tensor:0": tensor[np.newaxis]})
        meta = FrameMeta(f"cam{index % len(cameras)}", index, 0.0, width, height)
        result = post({name: value[0] for name, value in zip(names, outputs, strict=True)}, meta, geometry)
        return len(result.detections)

    try:
        for index in range(10):  # warm-up: kernel choice, allocations
            one(index)
        started = time.monotonic()
        while time.monotonic() - started < args.seconds:
            detections += one(frames)
            frames += 1
        ended = time.monotonic()
    finally:
        for camera in cameras:
            camera.close()
    window = sampler.window(started, ended)
    active = session.get_providers()
    return {"fps": frames / (ended - started), "frames": frames, "seconds": ended - started,
            "detections": detections, "providers": active, **window}  # fmt: skip


class Camera:
    """What a plain script reads a camera with: cv2.VideoCapture on the clip, from the start again at its
    end; or (--capture synthetic) the SDK's rendered pan-zoom frames."""

    def __init__(self, args: argparse.Namespace):
        from edge_sdk.core.opencv import import_cv2
        from edge_sdk.sources.synthetic import PanZoomSource

        self.cv2 = import_cv2()
        self.clip = args.clip
        if self.clip is None:
            self.rendered = PanZoomSource(ASTRONAUT, frames=CAMERA_FRAMES, size=args.frame_size, loop=True)
            self.rendered.open()
        else:
            self.capture = self.cv2.VideoCapture(str(self.clip))

    def read(self) -> np.ndarray:
        if self.clip is None:
            frame = self.rendered.read()
            assert frame is not None  # it loops
            return frame.image
        ok, image = self.capture.read()
        if not ok:
            self.capture.set(self.cv2.CAP_PROP_POS_FRAMES, 0)
            ok, image = self.capture.read()
        if not ok:
            raise RuntimeError(f"cv2.VideoCapture cannot read {self.clip}")
        return image

    def close(self) -> None:
        if self.clip is None:
            self.rendered.close()
        else:
            self.capture.release()


def camera_clip(args: argparse.Namespace, work: Path) -> Path:
    """The clip every camera plays (--capture video): CLIP_FRAMES of the pan-zoom path at the camera size,
    encoded once as MPEG-4 (mp4v, which every OpenCV video build reads); capture stages then decode
    instead of render, as with real cameras."""
    from edge_sdk.core.opencv import import_cv2
    from edge_sdk.sources.synthetic import PanZoomSource

    cv2 = import_cv2()
    path = work / f"cameras-{args.size}.mp4"
    started = time.monotonic()
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 30.0, args.frame_size)
    if not writer.isOpened():
        raise RuntimeError("cv2.VideoWriter cannot write mp4v here (an OpenCV without a video backend)")
    source = PanZoomSource(ASTRONAUT, frames=CLIP_FRAMES, size=args.frame_size)
    source.open()
    try:
        while (frame := source.read()) is not None:
            writer.write(frame.image)
    finally:
        source.close()
        writer.release()
    capture = cv2.VideoCapture(str(path))
    readable, count = capture.isOpened(), int(capture.get(cv2.CAP_PROP_FRAME_COUNT))
    ok = readable and capture.read()[0]
    capture.release()
    if not ok:
        raise RuntimeError(f"cv2.VideoCapture cannot read back the clip it wrote ({path})")
    print(f"   camera clip: {count} frames of {args.size} mp4v, {path.stat().st_size / 1e6:.1f} MB, "
          f"written in {time.monotonic() - started:.1f} s")  # fmt: skip
    return path


# --- the SDK pipeline -----------------------------------------------------------------------------


def pipeline_config(
    variant: str, args: argparse.Namespace, workers: int, batch: int, slots: int, work: Path
) -> PipelineConfig:
    width, height = args.frame_size
    uri = (
        str(args.clip) if args.clip else f"synthetic://?image={ASTRONAUT}&size={width}x{height}&frames={CAMERA_FRAMES}"
    )
    sources = "\n".join(f"  - {{uri: '{uri}', name: cam{i}, loop: true}}" for i in range(args.sources))
    path = work / f"{variant}-{workers}x{batch}.yaml"
    path.write_text(
        f"name: gpu-{variant}\n"
        f"model: {{path: {MODEL}, precision: {args.precision}}}\n"
        "preprocess: {resize: [300, 300], color: rgb, layout: nhwc, dtype: uint8}\n"
        f"sources:\n{sources}\n"
        f"postprocess: {{type: ssd, score_threshold: 0.5, labels: [person], decode: {DECODE[variant]}}}\n"
        "sinks: []\n"
        f"runtime: {{inference_workers: {workers}, batch_size: {batch}, batch_timeout_ms: {args.batch_timeout_ms}, "
        f"ring_slots: {slots}, stats_interval_s: 0.5"
        + (f", inference_threads: {args.inference_threads}" if args.inference_threads else "")
        + "}\n",
        encoding="utf-8",
    )
    return load_pipeline(path)


def busiest_processes(top: int = 14) -> str:
    """`ps`'s busiest processes (CPU share since they started, threads), to tell which stage takes the cores."""
    import subprocess

    done = subprocess.run(
        ["ps", "-eo", "pid,pcpu,nlwp,rss,args", "--sort=-pcpu"], capture_output=True, text=True, check=False
    )
    lines = done.stdout.splitlines()[: top + 1]
    return "   ps (mid-window):\n" + "\n".join("     " + line[:150] for line in lines)


def ring_slots(args: argparse.Namespace) -> int:
    """--ring-slots, lowered (not below 3) so that the rings take at most half the free shared memory."""
    width, height = args.frame_size
    per_slot = RingLayout(1, height, width).total_bytes
    host = HostMemory.probe()
    slots = args.ring_slots
    if host.shm_free_bytes is not None:
        fits = int(host.shm_free_bytes * 0.5 // (per_slot * args.sources))
        if fits < slots:
            print(f"   /dev/shm has {host.shm_free_bytes / 1e9:.2f} GB free: ring_slots {slots} -> {max(3, fits)}")
            slots = max(3, fits)
    return slots


def sdk_pipeline(
    variant: str, layout: str, profile: DeviceProfile, args: argparse.Namespace, sampler: GpuSampler,
    cache: EngineCache, work: Path,
) -> dict[str, Any]:  # fmt: skip
    workers, batch = (int(v) for v in layout.lower().split("x"))
    slots = ring_slots(args)
    config = pipeline_config(variant, args, workers, batch, slots, work)
    stop = threading.Event()
    points: list[tuple[float, int]] = []  # (time, output frames) once results flow
    window: dict[str, float] = {}
    stage_frames: list[dict[str, int]] = []  # frames per stage at each point of the window
    stage_busy: dict[str, list[float]] = {}

    def on_snapshot(snapshot: RuntimeSnapshot) -> None:
        now = time.monotonic()
        if stop.is_set():  # draining: only the measured window counts
            return
        done = sum(stage.frames for stage in snapshot.stages if stage.kind == "output")
        if done == 0:
            return
        window.setdefault("first_result", now)
        if now - window["first_result"] < args.warmup:
            return
        window.setdefault("start", now)
        points.append((now, done))
        stage_frames.append({stage.name: stage.frames for stage in snapshot.stages})
        for stage in snapshot.stages:
            stage_busy.setdefault(stage.name, []).append(stage.busy)
        if args.ps and not window.get("ps") and now - window["start"] >= args.seconds / 2:
            window["ps"] = 1.0
            print(busiest_processes())
        if now - window["start"] >= args.seconds:
            stop.set()

    guard = threading.Timer(args.seconds + args.warmup + 120, stop.set)  # never run away if results stop coming
    guard.daemon = True
    guard.start()
    try:
        summary = run_pipeline(config, profile, cache, stop=stop, on_snapshot=on_snapshot)
    finally:
        guard.cancel()
    if len(points) < 2:
        raise RuntimeError(f"no steady window: {summary.frames} frames in {summary.seconds:.1f} s")
    (t0, f0), (t1, f1) = points[0], points[-1]
    stages = [
        {"stage": name, "fps": round((stage_frames[-1][name] - stage_frames[0].get(name, 0)) / (t1 - t0), 1),
         "busy": round(statistics.fmean(stage_busy[name]), 2)}
        for name in stage_frames[-1]
    ]  # fmt: skip
    return {
        "layout": layout, "workers": workers, "batch_size": batch, "ring_slots": slots,
        "fps": (f1 - f0) / (t1 - t0), "frames": f1 - f0, "seconds": t1 - t0, "summary": summary.to_dict(),
        "stages": stages, **sampler.window(t0, t1),
    }  # fmt: skip


# --- main -----------------------------------------------------------------------------------------


def environment(report: Report, profile: DeviceProfile, sampler: GpuSampler, args: argparse.Namespace) -> None:
    import onnxruntime as ort

    from edge_sdk.backends.onnxruntime.providers import loadable_providers

    host = HostMemory.probe()
    facts = {
        "python": platform.python_version(),
        "cores": os.cpu_count(),
        "onnxruntime": ort.__version__,
        "loadable_providers": loadable_providers(),
        "profile": profile.name,
        "gpu": sampler.name or None,
        "nvml": sampler.problem or "ok",
        "shm_free_gb": round(host.shm_free_bytes / 1e9, 2) if host.shm_free_bytes is not None else None,
        "sources": args.sources,
        "size": args.size,
        "capture": args.capture,
        "precision": args.precision,
        "io_binding": profile.engine.io_binding,
        "inference_threads": args.inference_threads or "default",
    }
    report.data["environment"] = facts
    print("environment: " + ", ".join(f"{k} {v}" for k, v in facts.items()))
    if sampler.problem is not None:
        print(f"NVML not available ({sampler.problem}): GPU utilisation is not measured")


def targets(report: Report, variant: str, baseline: dict[str, Any] | None, pipelines: list[dict[str, Any]]) -> None:
    if not pipelines:
        return
    best = max(pipelines, key=lambda p: p["fps"])
    util = best.get("gpu_util_mean")
    rows = [
        ("GPU busy during the pipeline", util, UTIL_TARGET, "%"),
        ("pipeline FPS / plain loop FPS", best["fps"] / baseline["fps"] if baseline else None, SPEED_UP_TARGET, "x"),
    ]
    for name, value, goal, unit in rows:
        verdict = "n/a" if value is None else ("PASS" if value >= goal else "FAIL")
        shown = "n/a" if value is None else f"{value:.2f}{unit}"
        print(f"   target {variant}, {name} (layout {best['layout']}): {shown} (>= {goal:g}{unit}) {verdict}")
        report.data["targets"].append({"variant": variant, "target": name, "layout": best["layout"],
                                       "value": value, "goal": goal, "verdict": verdict})  # fmt: skip


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="x86-nvidia")
    parser.add_argument("--variants", default="split,full", help="split first: the run's point, should time run short")
    parser.add_argument(
        "--precision", default="fp32", help="of the pipeline's engine and the loop's graph (fp16: both converted)"
    )
    parser.add_argument("--seconds", type=float, default=20.0, help="measured seconds per phase")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds of pipeline results before measuring")
    parser.add_argument("--sources", type=int, default=8)
    parser.add_argument("--size", default="1920x1080", help="WIDTHxHEIGHT of every camera")
    parser.add_argument("--layouts", default="4x8", help="comma-separated WORKERSxBATCH for the pipeline")
    parser.add_argument(
        "--capture",
        choices=("video", "synthetic"),
        default="video",
        help="video: every camera decodes an encoded clip (as real cameras do); synthetic: frames rendered per read",
    )
    parser.add_argument("--ring-slots", type=int, default=8)
    parser.add_argument(
        "--inference-threads", type=int, default=0, help="runtime.inference_threads (0 = the runtime's default)"
    )
    parser.add_argument("--io-binding", choices=("auto", "off"), default="auto", help="the profile's engine io_binding")
    parser.add_argument("--cache", type=Path, help="engine cache to reuse between runs (default: a throw-away one)")
    parser.add_argument("--ps", action="store_true", help="print the busiest processes halfway through each phase")
    parser.add_argument("--batch-timeout-ms", type=float, default=2.0)
    parser.add_argument("--sample-ms", type=float, default=50.0, help="NVML sampling period (50-100 ms)")
    parser.add_argument("--device", type=int, default=0, help="GPU index NVML samples")
    parser.add_argument("--skip-baseline", action="store_true")
    parser.add_argument("--total-seconds", type=float, default=230.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    width, height = (int(v) for v in args.size.lower().split("x"))
    args.frame_size = (width, height)
    return args


def main() -> None:
    args = parse_args()
    report = Report(args.json)
    budget = Budget(args.total_seconds)
    start_watchdog(report, args.total_seconds + 40)
    profile = ProfileCatalog(REPO / "device_profiles").load(args.profile)
    if args.io_binding != profile.engine.io_binding:
        engine = profile.engine.model_copy(update={"io_binding": args.io_binding})
        profile = profile.model_copy(update={"engine": engine})
    sampler = GpuSampler(args.device, args.sample_ms / 1000)
    environment(report, profile, sampler, args)
    phase_seconds = args.seconds + args.warmup + 12  # + the stages' start-up and drain
    with tempfile.TemporaryDirectory(prefix="edge-sdk-gpu-pipeline-") as scratch:
        work, cache = Path(scratch), EngineCache(args.cache or Path(scratch) / "cache")
        args.clip = None
        if args.capture == "video":
            try:
                args.clip = camera_clip(args, work)
            except Exception as exc:
                print(f"   no camera clip ({exc}): the cameras render their frames instead (--capture synthetic)")
                report.data["environment"]["capture"] = "synthetic (no clip)"
        for variant in args.variants.split(","):
            print(
                f"\n== {variant} detector ({'decode + NMS on the host' if variant == 'split' else 'NMS Loop in the graph'})"
            )
            baseline = None
            if not args.skip_baseline and budget.allows(args.seconds + 10, f"{variant} baseline"):
                try:
                    baseline = plain_loop(variant, profile, args, sampler, work)
                    print(f"   plain loop: {baseline['fps']:.1f} FPS ({baseline['frames']} frames, "
                          f"{baseline['detections']} detections, {baseline['providers'][0]}); {util_text(baseline)}")  # fmt: skip
                except Exception as exc:
                    print(f"   plain loop: {type(exc).__name__}: {exc}")
                    traceback.print_exc(limit=3)
                    baseline = None
                report.data["phases"].append({"variant": variant, "phase": "baseline", **(baseline or {"error": True})})
                report.save()
            results = []
            for layout in args.layouts.split(","):
                first = not any(
                    p.get("variant") == variant and p.get("phase") == "pipeline" for p in report.data["phases"]
                )
                if not budget.allows(
                    phase_seconds + (20 if first else 0), f"{variant} pipeline {layout}"
                ):  # + the build
                    continue
                try:
                    result = sdk_pipeline(variant, layout, profile, args, sampler, cache, work)
                except Exception as exc:
                    print(f"   pipeline {layout}: {type(exc).__name__}: {exc}")
                    traceback.print_exc(limit=3)
                    report.data["phases"].append(
                        {"variant": variant, "phase": "pipeline", "layout": layout, "error": str(exc)}
                    )
                    report.save()
                    continue
                results.append(result)
                report.data["phases"].append({"variant": variant, "phase": "pipeline", **result})
                report.save()
                engine = result["summary"]
                print(f"   pipeline {layout} (workers x batch, {result['ring_slots']} slots): {result['fps']:.1f} FPS "
                      f"over {result['seconds']:.1f} s, mean batch {engine['mean_batch']}, engine "
                      f"{'built' if engine['engine_built'] else 'cached'} {engine['engine_seconds']:.1f} s; {util_text(result)}")  # fmt: skip
                print(
                    "   stages: " + ", ".join(f"{s['stage']} {s['fps']}/s busy {s['busy']}" for s in result["stages"])
                )
                per_frame = ", ".join(f"{k} {v}" for k, v in engine["stage_mean_ms"].items())
                print(f"   mean ms per frame: {per_frame}; restarts {engine['restarts']}, dropped {engine['dropped']}")
            targets(report, variant, baseline, results)
            report.save()
    sampler.close()
    print(f"\ndone in {time.monotonic() - budget.started:.0f} s")


if __name__ == "__main__":
    main()
