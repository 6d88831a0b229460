"""Time to first inference: cold engine build vs cached engine, for the demo model, side by side.

Usage: python tools/bench/engine_start.py [--rounds 7] [--model PATH] [--profile x86-cpu]

Each round builds into an empty cache (cold), then starts again from that cache (cached); rounds
alternate so both see the same machine load. Prints medians and the cold/cached ratio.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from edge_sdk.engines.cache import EngineCache
from edge_sdk.engines.engine import prepare_engine
from edge_sdk.profiles import ProfileCatalog

REPO = Path(__file__).resolve().parents[2]


def first_inference_seconds(model: Path, profile_name: str, cache_dir: Path, frame: np.ndarray) -> tuple[float, bool]:
    started = time.perf_counter()
    profile = ProfileCatalog(REPO / "device_profiles").load(profile_name)
    prepared = prepare_engine(model, profile, cache=EngineCache(cache_dir))
    with prepared.open() as runner:
        runner.infer({runner.inputs[0].name: frame})
    return time.perf_counter() - started, prepared.built


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--model", type=Path, default=REPO / "models" / "ssdlite_mobilenet_v2_person.onnx")
    parser.add_argument("--profile", default="x86-cpu")
    args = parser.parse_args()
    frame = np.zeros((1, 480, 640, 3), np.uint8)
    cold, cached = [], []
    with tempfile.TemporaryDirectory(prefix="edge-sdk-bench-") as scratch:
        first_inference_seconds(args.model, args.profile, Path(scratch) / "warmup", frame)  # imports, page cache
        for round_ in range(args.rounds):
            cache_dir = Path(scratch) / f"round{round_}"
            seconds, built = first_inference_seconds(args.model, args.profile, cache_dir, frame)
            assert built, "the cold run must build"
            cold.append(seconds)
            seconds, built = first_inference_seconds(args.model, args.profile, cache_dir, frame)
            assert not built, "the second run must come from the cache"
            cached.append(seconds)
    cold_ms, cached_ms = statistics.median(cold) * 1000, statistics.median(cached) * 1000
    print(f"model: {args.model.name}, profile: {args.profile}, rounds: {args.rounds}")
    print(f"cold build -> first inference:     median {cold_ms:7.1f} ms  (min {min(cold) * 1000:.1f})")
    print(f"cached engine -> first inference:  median {cached_ms:7.1f} ms  (min {min(cached) * 1000:.1f})")
    print(f"ratio cold / cached: {cold_ms / cached_ms:.2f}x")


if __name__ == "__main__":
    main()
