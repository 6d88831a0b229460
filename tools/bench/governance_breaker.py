"""A 5x burst on a live camera's frames, with and without the circuit breaker's lighter fallback model.

Usage: python tools/bench/governance_breaker.py [--profile x86-cpu] [--load 0.5] [--burst 5]
       [--seconds 5,3,5] [--slo-ms 0] [--slots 8] [--json PATH]

The pipeline: the ResNet-18-sized CNN of tools/harness (float32 [1, 3, 160, 160], width 64) as the
primary and the same network at width 16 as the `fallback:` (the "smaller variant"), both prepared by
the pipeline's own engine setup (`prepare_models`: built, gated and cached for the profile), each
frame run by the inference step both runtimes run (`FrameInference`, or `BreakerInference` with the
breaker; one thread per engine call, as the processes runtime's CPU workers have). The camera is simulated on one thread: frames arrive on a fixed schedule (steady at --load
of what the primary carries alone, then --burst times that, then steady again: --seconds per phase),
wait in a buffer of --slots frames (a live ring's default; when it is full the oldest is dropped, as
a live source's `latest` policy does), and are served one at a time by one inference worker. A
frame's latency runs from its arrival to its result, so the wait counts, as it does for a live source.

Per phase (by when frames arrived): frames, those over the SLO (late), those dropped, the p99 of
those served, and the share the fallback computed; then the breaker's status events. The SLO
(--slo-ms 0: 4x the primary's time for one frame, at least 50 ms) is also the breaker's p99_ms; the
breaker judges 1 s windows from 10 frames on, stays open 1 s, and probes with 3 frames (the default).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from collections import deque
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from edge_sdk.core.opencv import import_cv2  # noqa: E402
from edge_sdk.core.preprocess import frame_feed  # noqa: E402
from edge_sdk.core.results import Frame, FrameMeta  # noqa: E402
from edge_sdk.core.status import StatusEvent  # noqa: E402
from edge_sdk.engines.cache import EngineCache  # noqa: E402
from edge_sdk.pipeline.config import PipelineConfig  # noqa: E402
from edge_sdk.pipeline.engine_setup import PreparedModels, prepare_models  # noqa: E402
from edge_sdk.pipeline.fallback import breaker_inference  # noqa: E402
from edge_sdk.pipeline.frame_steps import FrameInference  # noqa: E402
from edge_sdk.postprocess import build_postprocessor  # noqa: E402
from edge_sdk.profiles import DeviceProfile, ProfileCatalog  # noqa: E402
from tools.harness.onnx_models import resnet18_like  # noqa: E402

ASTRONAUT = REPO / "tools" / "assets" / "astronaut.jpg"
SIZE = 160
PHASES = ("before", "burst", "after")


@dataclass
class PhaseTally:
    arrived: int = 0
    dropped: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    fallback: int = 0

    def row(self, slo_ms: float) -> dict[str, Any]:
        served = len(self.latencies_ms)
        return {
            "frames": self.arrived,
            "late": sum(1 for ms in self.latencies_ms if ms > slo_ms),
            "dropped": self.dropped,
            "p99_ms": float(np.percentile(self.latencies_ms, 99)) if served else float("nan"),
            "fallback_share": self.fallback / served if served else 0.0,
        }


def pipeline(folder: Path, slo_ms: float) -> PipelineConfig:
    primary = resnet18_like(folder / "primary.onnx", width=64, size=SIZE, classes=100)
    light = resnet18_like(folder / "light.onnx", width=16, size=SIZE, classes=100, seed=1)
    breaker = {"p99_ms": slo_ms, "window_s": 1.0, "min_requests": 10, "ejection_s": 1.0}
    return PipelineConfig.model_validate(
        {
            "name": "burst",
            "model": {"path": str(primary)},
            "fallback": {"path": str(light), "breaker": breaker},
            "preprocess": {"dtype": "float32", "layout": "nchw", "resize": [SIZE, SIZE], "scale": 1 / 255},
            "sources": [{"uri": "synthetic://?realtime=true", "name": "cam"}],
            "postprocess": {"type": "classification", "output": "logits"},
        }
    )


def service_ms(infer: FrameInference, frame: Frame, count: int = 20) -> float:
    """The median time of one frame through `infer` alone."""
    infer([frame])
    times = []
    for _ in range(count):
        started = time.perf_counter()
        infer([frame])
        times.append((time.perf_counter() - started) * 1000)
    return float(np.median(times))


def schedule(rate: float, burst: float, seconds: tuple[float, float, float]) -> list[tuple[float, int]]:
    """(arrival offset s, phase) of every frame: evenly spaced at each phase's rate."""
    arrivals: list[tuple[float, int]] = []
    start = 0.0
    for phase, (length, factor) in enumerate(zip(seconds, (1.0, burst, 1.0), strict=True)):
        period = 1.0 / (rate * factor)
        arrivals += [(start + k * period, phase) for k in range(int(length / period))]
        start += length
    return arrivals


def serve(infer: FrameInference, image: np.ndarray, arrivals: list[tuple[float, int]], slots: int) -> list[PhaseTally]:
    """Frames arrive on `arrivals` into a buffer of `slots` (full: the oldest is dropped) and are served in order."""
    tallies = [PhaseTally() for _ in PHASES]
    waiting: deque[int] = deque()
    start = time.monotonic() + 0.05
    wall_start = time.time() + 0.05
    admitted = 0
    while admitted < len(arrivals) or waiting:
        now = time.monotonic() - start
        while admitted < len(arrivals) and arrivals[admitted][0] <= now:
            tallies[arrivals[admitted][1]].arrived += 1
            if len(waiting) >= slots:
                tallies[arrivals[waiting.popleft()][1]].dropped += 1
            waiting.append(admitted)
            admitted += 1
        if not waiting:
            time.sleep(max(0.0, arrivals[admitted][0] - now))
            continue
        index = waiting.popleft()
        arrived_at, phase = arrivals[index]
        frame = Frame(FrameMeta("cam", index, wall_start + arrived_at, image.shape[1], image.shape[0]), image)
        (result,) = infer([frame], [(now - arrived_at) * 1000])
        tallies[phase].latencies_ms.append((time.monotonic() - start - arrived_at) * 1000)
        tallies[phase].fallback += result.model == "fallback"
    return tallies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="x86-cpu")
    parser.add_argument("--load", type=float, default=0.5, help="steady rate as a share of the primary's capacity")
    parser.add_argument("--burst", type=float, default=5.0, help="the burst's rate as a multiple of the steady one")
    parser.add_argument("--seconds", default="5,3,5", help="before,burst,after in seconds")
    parser.add_argument("--slo-ms", type=float, default=0.0, help="0: 4x the primary's time per frame, >= 50 ms")
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    seconds = tuple(float(s) for s in args.seconds.split(","))
    assert len(seconds) == 3, "--seconds takes before,burst,after"
    profile: DeviceProfile = ProfileCatalog(REPO / "device_profiles").load(args.profile)
    cv2 = import_cv2()
    image = cv2.resize(cv2.imread(str(ASTRONAUT)), (320, 240))

    with tempfile.TemporaryDirectory() as folder, ExitStack() as stack:
        config = pipeline(Path(folder), slo_ms=100.0)  # built once to time the models; the SLO is set below
        models: PreparedModels = prepare_models(config, profile, EngineCache(Path(folder) / "engines"))
        assert models.fallback is not None
        postprocess = build_postprocessor(config.postprocess)
        runner = stack.enter_context(models.primary.open(threads=1, share_cpu=True))
        alone = FrameInference(
            runner, models.input_name, frame_feed(models.preprocess, models.engine_input), postprocess
        )
        light_runner = stack.enter_context(models.fallback.engine.open(threads=1, share_cpu=True))
        light_feed = frame_feed(models.fallback.preprocess, models.fallback.engine_input)
        light = FrameInference(light_runner, models.fallback.input_name, light_feed, postprocess)
        frame = Frame(FrameMeta("cam", 0, 0.0, 320, 240), image)
        primary_ms, fallback_ms = service_ms(alone, frame), service_ms(light, frame)
        slo_ms = float(round(args.slo_ms or max(50.0, 4 * primary_ms)))
        rate = args.load * 1000 / primary_ms
        arrivals = schedule(rate, args.burst, seconds)
        settings = models.fallback.breaker.model_copy(update={"p99_ms": slo_ms})
        plan = dataclasses.replace(models.fallback, breaker=settings)
        print(
            f"primary {primary_ms:.1f} ms/frame, fallback {fallback_ms:.1f} ms/frame ({args.profile}); "
            f"steady {rate:.1f} FPS, burst {rate * args.burst:.1f} FPS; SLO {slo_ms:.0f} ms; {args.slots} slots"
        )
        events: list[tuple[float, StatusEvent]] = []
        started = time.monotonic()

        def on_status(event: StatusEvent) -> None:
            events.append((time.monotonic() - started, event))

        breaker = breaker_inference(alone, plan, light_runner, "inference:0", on_status, frozenset({"cam"}))
        runs = {"alone": serve(alone, image, arrivals, args.slots)}
        started = time.monotonic()
        runs["breaker"] = serve(breaker, image, arrivals, args.slots)

    table = {name: {PHASES[i]: tally.row(slo_ms) for i, tally in enumerate(tallies)} for name, tallies in runs.items()}
    print(f"\n{'phase':<8}{'run':<9}{'frames':>7}{'late':>6}{'dropped':>8}{'p99 ms':>8}{'fallback':>9}")
    for phase in PHASES:
        for name in runs:
            row = table[name][phase]
            print(
                f"{phase:<8}{name:<9}{row['frames']:>7}{row['late']:>6}{row['dropped']:>8}"
                f"{row['p99_ms']:>8.0f}{row['fallback_share']:>9.0%}"
            )
    for name in runs:
        late = sum(table[name][p]["late"] for p in PHASES)
        dropped = sum(table[name][p]["dropped"] for p in PHASES)
        print(f"total {name}: {late} late, {dropped} dropped")
    print("\nbreaker events (s from the start of its run):")
    for at, event in events:
        print(f"  {at:6.2f}  {event.describe()}")
    if args.json:
        report = {"primary_ms": primary_ms, "fallback_ms": fallback_ms, "slo_ms": slo_ms, "rate_fps": rate}
        args.json.write_text(json.dumps(report | {"runs": table}, indent=2))


if __name__ == "__main__":
    main()
