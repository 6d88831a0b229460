"""Demo pipeline throughput and per-frame latency on this machine.

Usage: python tools/bench/demo_pipeline.py [--runs 3] [--pipeline pipelines/demo.yaml]

Runs the pipeline file as `make demo` does (engine cached after the first run), with standard
output silenced, and prints FPS and p50/p99 latency per run and their medians.
"""

from __future__ import annotations

import argparse
import contextlib
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
    config = load_pipeline(args.pipeline)
    profile = ProfileCatalog(REPO / "device_profiles").load(args.profile)
    summaries = []
    with tempfile.TemporaryDirectory(prefix="edge-sdk-bench-") as scratch:
        cache = EngineCache(Path(scratch))
        for _ in range(args.runs):
            with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
                summaries.append(run_pipeline(config, profile, cache))
    print(f"pipeline: {args.pipeline.name}, profile: {profile.name}, cores: {os.cpu_count()}")
    for i, s in enumerate(summaries, 1):
        stages = ", ".join(f"{k} {v:.1f}" for k, v in s.stage_mean_ms.items() if k != "total")
        print(
            f"run {i}: {s.frames} frames, {s.fps:.1f} FPS, p50 {s.latency_p50_ms:.1f} ms, "
            f"p99 {s.latency_p99_ms:.1f} ms (mean ms: {stages})"
        )
    print(
        f"median: {statistics.median(s.fps for s in summaries):.1f} FPS, "
        f"p50 {statistics.median(s.latency_p50_ms for s in summaries):.1f} ms, "
        f"p99 {statistics.median(s.latency_p99_ms for s in summaries):.1f} ms"
    )


if __name__ == "__main__":
    main()
