"""Per-frame latency of edge-only, cloud-only, one split and the adaptive agent on a throttled link.

The edge (this process) is pinned to core 0 with one engine thread; the worker (`edge-sdk offload
worker`, one thread) to core 1; a private Mosquitto and the throttling proxy (tools/harness) carry
the edge's link: bandwidth per cell, RTT = 2 x --delay-ms. Frames are the shipped scene's eight
variants at --fps, through the agent's dispatch (the same object `edge-sdk run` uses). Every cell
prints mean and p99 latency from submit to result, FPS, the share per place computed, and frames lost.

    PYTHONPATH=. python tools/bench/offload_latency.py --bandwidths 100,20,5,1 --frames 60
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import yaml

from cloud_offload.agent import OffloadDispatch
from edge_sdk.core.preprocess import frame_feed
from edge_sdk.core.results import Frame, FrameMeta
from edge_sdk.engines.cache import EngineCache
from edge_sdk.engines.equivalence import scene_frames
from edge_sdk.pipeline.config import PipelineConfig
from edge_sdk.pipeline.engine_setup import prepare_models
from edge_sdk.pipeline.extensions import DispatchContext
from edge_sdk.pipeline.frame_steps import FrameInference
from edge_sdk.postprocess import build_postprocessor
from edge_sdk.profiles import ProfileCatalog
from tools.harness.broker import BrokerFactory
from tools.harness.throttle_proxy import LinkShape, ThrottlingProxy

ROOT = Path(__file__).resolve().parents[2]
SPLIT = "split@FeatureExtractor/MobilenetV2/expanded_conv_6/project/BatchNorm/FusedBatchNorm:0+1"
DETECTOR = {
    "name": "detector",
    "model": {"path": str(ROOT / "models" / "ssdlite_mobilenet_v2_person.onnx")},
    "preprocess": {"resize": [300, 300], "color": "rgb", "layout": "nhwc", "dtype": "uint8"},
    "sources": [{"uri": "synthetic://?frames=4&size=640x480", "name": "cam"}],
    "postprocess": {"type": "ssd", "labels": ["person"]},
}


def cell(dispatch: OffloadDispatch, frames: int, fps: float) -> dict[str, object]:
    images = scene_frames(8)
    submitted: dict[int, float] = {}
    seconds: dict[int, float] = {}
    where: Counter[str] = Counter()

    def take(wait_s: float = 0.0) -> None:
        for meta, result in dispatch.collect(wait_s):
            if not result.update:
                seconds[meta.index] = time.monotonic() - submitted[meta.index]
                where[result.computed_at or "edge"] += 1

    started = time.monotonic()
    for index in range(frames):
        image = images[index % len(images)]
        submitted[index] = time.monotonic()
        dispatch.submit([Frame(FrameMeta("cam", index, time.time(), image.shape[1], image.shape[0]), image)], [0.0])
        take()
        time.sleep(max(0.0, started + (index + 1) / fps - time.monotonic()))
    while len(seconds) < frames and time.monotonic() - started < frames / fps + 10:
        take(0.05)
    wall = time.monotonic() - started
    latencies = sorted(ms * 1000 for ms in seconds.values())
    return {
        "mean_ms": statistics.fmean(latencies),
        "p99_ms": latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
        "fps": len(seconds) / wall,
        "where": dict(where),
        "lost": frames - len(seconds),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bandwidths", default="100,20,5,1", help="Mbit/s per cell")
    parser.add_argument("--delay-ms", type=float, default=10.0, help="one-way delay (RTT is twice)")
    parser.add_argument("--frames", type=int, default=60)
    parser.add_argument("--fps", type=float, default=10.0)
    parser.add_argument("--variants", default=f"edge,cloud,{SPLIT},adaptive")
    args = parser.parse_args()
    os.sched_setaffinity(0, {0})
    folder = Path(tempfile.mkdtemp(prefix="offload-bench-"))
    profile = ProfileCatalog().load("x86-cpu")
    cache = EngineCache()
    config = PipelineConfig.model_validate(DETECTOR)
    models = prepare_models(config, profile, cache)
    (folder / "served.yaml").write_text(yaml.safe_dump(DETECTOR))
    with BrokerFactory(folder / "brokers") as brokers:
        broker = brokers()
        (folder / "worker.yaml").write_text(yaml.safe_dump({"host": broker.host, "port": broker.port}))
        edge_sdk = str(Path(sys.executable).parent / "edge-sdk")
        worker = subprocess.Popen(
            ["taskset", "-c", "1", edge_sdk, "offload", "worker", "--broker", "worker.yaml", "--pipeline",
             "served.yaml", "--id", "bench", "--threads", "1"],
            cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        try:
            assert worker.stdout is not None
            for line in worker.stdout:
                if "ready on" in line:
                    break
            with ThrottlingProxy((broker.host, broker.port), LinkShape(100e6, args.delay_ms / 1000)) as proxy:
                (folder / "edge.yaml").write_text(yaml.safe_dump({"host": "127.0.0.1", "port": proxy.port}))
                print(f"{'Mbit/s':>6} {'variant':<12} {'mean ms':>8} {'p99 ms':>8} {'FPS':>6} lost  computed at")
                for mbps in (float(b) for b in args.bandwidths.split(",")):
                    proxy.set(bandwidth_bps=mbps * 1e6)
                    for variant in args.variants.split(","):
                        fixed = None if variant == "adaptive" else variant
                        offload = {
                            "broker": str(folder / "edge.yaml"), "device": "cam1", "modes": ["edge", "cloud", "split"],
                            "cuts": [SPLIT.removeprefix("split@").removesuffix("+1")], "fixed": fixed, "deadline_ms": 1000,
                        }  # fmt: skip
                        pipeline = PipelineConfig.model_validate({**DETECTOR, "offload": offload})
                        runner = models.primary.open(threads=1)
                        runner.activate()
                        local = FrameInference(
                            runner, models.input_name, frame_feed(models.preprocess, models.engine_input),
                            build_postprocessor(config.postprocess),
                        )  # fmt: skip
                        context = DispatchContext(
                            pipeline, pipeline.offload, profile, cache.root, local, 0, lambda e: None
                        )
                        dispatch = OffloadDispatch(context)
                        deadline = time.monotonic() + 10
                        while time.monotonic() < deadline and not (
                            dispatch.link.estimate().bandwidth_bps and dispatch.link.workers(dispatch.key)
                        ):
                            time.sleep(0.1)
                        try:
                            result = cell(dispatch, args.frames, args.fps)
                        finally:
                            dispatch.close()
                            runner.deactivate()
                        shares = ", ".join(
                            f"{w.split('/')[2] if '/' in w else w} {n}" for w, n in result["where"].items()
                        )  # type: ignore[union-attr]
                        name = "split@conv_6" if variant == SPLIT else variant
                        print(
                            f"{mbps:>6g} {name:<12} {result['mean_ms']:>8.1f} {result['p99_ms']:>8.1f} "
                            f"{result['fps']:>6.1f} {result['lost']:>4}  {shares}",
                            flush=True,
                        )
        finally:
            worker.terminate()
            worker.wait(timeout=30)


if __name__ == "__main__":
    main()
