"""Demo pipeline throughput and per-frame latency on this machine.

Usage: python tools/bench/demo_pipeline.py [--runs 3] [--pipeline pipelines/demo.yaml]

Runs the pipeline file as `make demo` does (engine cached after the first run; the stdout sink is
left out), once with its runtime (multi-process by default) and once inline (one process), and
prints FPS and p50/p99 latency per run and their medians. For a file source the multi-process
latency includes the time a frame waits in the ring (the capture stage reads ahead); the inline
latency is the per-frame processing time (preprocess + inference + post-process).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

from edge_sdk.engines.cache import EngineCache
from edge_sdk.pipeline.config import load_pipeline
from edge_sdk.pipeline.run import run_pipeline
from edge_sdk.profiles import ProfileCatalog

REPO = Path(__file__).resolve().parents[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--pipeline", type=Path, default=REPO / "pipelines" / "demo.yaml")
    parser.add_argument("--profile", default="x86-cpu")
    args = parser.parse_args()
    loaded = load_pipeline(args.pipeline)
    quiet = loaded.model_copy(update={"sinks": [s for s in loaded.sinks if s.type != "stdout"]})
    quiet._base_dir = loaded.base_dir
    inline = quiet.model_copy(update={"runtime": quiet.runtime.model_copy(update={"mode": "inline"})})
    inline._base_dir = loaded.base_dir
    profile = ProfileCatalog(REPO / "device_profiles").load(args.profile)
    print(f"pipeline: {args.pipeline.name}, profile: {profile.name}, cores: {os.cpu_count()}")
    with tempfile.TemporaryDirectory(prefix="edge-sdk-bench-") as scratch:
        cache = EngineCache(Path(scratch))
        for label, config in ((f"runtime {quiet.runtime.mode}", quiet), ("runtime inline", inline)):
            summaries = [run_pipeline(config, profile, cache) for _ in range(args.runs)]
            for i, s in enumerate(summaries, 1):
                stages = ", ".join(f"{k} {v:.1f}" for k, v in s.stage_mean_ms.items() if k != "total")
                print(
                    f"{label} run {i}: {s.frames} frames, {s.fps:.1f} FPS, p50 {s.latency_p50_ms:.1f} ms, "
                    f"p99 {s.latency_p99_ms:.1f} ms (mean ms: {stages})"
                )
            print(
                f"{label} median: {statistics.median(s.fps for s in summaries):.1f} FPS, "
                f"p50 {statistics.median(s.latency_p50_ms for s in summaries):.1f} ms, "
                f"p99 {statistics.median(s.latency_p99_ms for s in summaries):.1f} ms"
            )


if __name__ == "__main__":
    main()
