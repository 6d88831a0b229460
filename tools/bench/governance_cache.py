"""Hot-model cache: plain LRU against LRU with residency and the frequency rule, on a skewed stream.

Usage: python tools/bench/governance_cache.py [--requests 1200] [--rate 10] [--zipf 1.0]
       [--min-residency-s 30] [--models-held 4] [--seed 0] [--cache-dir DIR]

Ten distinct ResNet-18-shaped ONNX models of different widths (so their engines differ in size) are
built through the engine cache for x86-cpu. A request stream picks a model by Zipf(s) over the ten
(rank 1 most asked for; ranks are given to the sizes in a shuffled order) at `--rate` requests per
second of stream time; the second workload is the same stream with a burst of the six rarest models
(each asked twice in a row) every 20 s. The budget is `--models-held` times the mean engine size, so
the cache holds about that many of the ten.

Each request runs through the real policy (edge_sdk/serving/model_cache.py, on the stream's clock)
and real engines: a hit is one inference on the shipped scene; a miss pays for closing what is evicted,
opening the engine and its warm-up (cloud_offload/worker_models.open_model, what the worker does), then
the inference. A miss the policy does not admit is served the same way by an engine opened for it
alone and closed after (so every miss costs a load, in both policies, and only what stays loaded
differs). Latency is that cost per request, without queueing. "reloads/min" counts engine opens of a
model opened before in the run, per minute of stream time; "kept reloads/min" only those the cache kept
(what the worker itself loads: it answers a miss the policy does not admit at once, loading nothing). Both policies start with the same models
loaded (the first that fit) and see the same stream.

The worker itself never makes a request wait for a load (it answers "model loading" and the edge
computes that frame), so there a miss costs the edge's own compute, not the load; the bench prices a
miss as a server that loads on demand would, as the issue's figure asks.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from cloud_offload.frame_codec import downscale  # noqa: E402
from cloud_offload.worker_models import ModelSpec, ServedModel, open_model, prepare_model  # noqa: E402
from edge_sdk.engines.cache import EngineCache  # noqa: E402
from edge_sdk.engines.equivalence import scene_frames  # noqa: E402
from edge_sdk.pipeline.config import PipelineConfig  # noqa: E402
from edge_sdk.profiles import ProfileCatalog  # noqa: E402
from edge_sdk.serving.model_cache import MB, ModelCache, ModelCacheSettings, Refusal  # noqa: E402
from tools.harness import onnx_models  # noqa: E402

WIDTHS = (16, 20, 24, 28, 32, 32, 40, 40, 48, 56)
SIZE = 128
BURST_EVERY_S = 20.0
BURST_MODELS = 6


def build_models(folder: Path, cache: EngineCache, seed: int) -> list[ModelSpec]:
    """The ten models, index = popularity rank - 1 (widths shuffled over the ranks)."""
    widths = list(WIDTHS)
    random.Random(seed).shuffle(widths)
    profile = ProfileCatalog().load("x86-cpu")
    specs = []
    for rank, width in enumerate(widths):
        path = onnx_models.resnet18_like(folder / f"m{rank}.onnx", width=width, seed=rank, classes=10, size=SIZE)
        config = PipelineConfig.model_validate(
            {
                "name": f"rank{rank + 1}-w{width}",
                "model": {"path": str(path)},
                "preprocess": {
                    "resize": [SIZE, SIZE],
                    "layout": "nchw",
                    "dtype": "float32",
                    "scale": 1 / 255,
                    "fold": False,
                },
                "sources": [{"uri": "synthetic://?frames=4&size=320x240", "name": "cam"}],
                "postprocess": {"type": "classification", "output": "logits"},
            }
        )
        specs.append(prepare_model(config, profile, cache))
    return specs


def stream(count: int, rate: float, zipf_s: float, models: int, seed: int, bursts: bool) -> list[tuple[float, int]]:
    """(arrival time in s, model index) for each request."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, models + 1) ** zipf_s
    picks = rng.choice(models, size=count, p=weights / weights.sum())
    gaps = rng.exponential(1.0 / rate, size=count)
    requests: list[tuple[float, int]] = []
    now, next_burst = 0.0, BURST_EVERY_S
    for gap, pick in zip(gaps, picks, strict=True):
        now += gap
        if bursts and now >= next_burst:
            rare = list(range(models - BURST_MODELS, models))
            for model in rare + rare:
                requests.append((now, model))
                now += 1.0 / rate
            next_burst += BURST_EVERY_S
        requests.append((now, int(pick)))
    return requests[:count]


@dataclass
class Outcome:
    latencies_ms: list[float]
    hits: int
    misses: int
    opens: int
    reopens: int
    admitted_reopens: int
    """Reopens that stayed loaded: what the worker itself loads (it answers a refused miss at once)."""
    evictions: int
    refused: int
    stream_s: float


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def run(specs: list[ModelSpec], settings: ModelCacheSettings, requests: list[tuple[float, int]]) -> Outcome:
    clock = Clock()
    policy = ModelCache(settings, {spec.key: spec.engine_bytes for spec in specs}, clock)
    by_key = {spec.key: spec for spec in specs}
    frame = scene_frames(1)[0]
    feeds: dict[str, dict[str, np.ndarray]] = {}
    open_models: dict[str, tuple[ServedModel, ExitStack]] = {}
    opened: set[str] = set()
    opens = reopens = admitted = 0

    def load(key: str) -> tuple[ServedModel, ExitStack]:
        nonlocal opens, reopens
        stack = ExitStack()
        served = open_model(by_key[key], stack, threads=1)
        opens += 1
        reopens += key in opened
        opened.add(key)
        if key not in feeds:
            feeds[key] = {served.input_name: served.feed(downscale(frame, served.max_side))}
        return served, stack

    for key in policy.start_order(spec.key for spec in specs):
        policy.admit(key)
        open_models[key] = load(key)
        policy.loaded(key)
    opens = reopens = 0
    latencies: list[float] = []
    try:
        for at, index in requests:
            clock.now = at
            key = specs[index].key
            began = time.perf_counter()
            if policy.lookup(key):
                served = open_models[key][0]
                served.runner.infer(feeds[key])
            else:
                decision = policy.admit(key)
                if isinstance(decision, Refusal):  # served by an engine of its own, closed after
                    served, stack = load(key)
                    with stack:
                        served.runner.infer(feeds[key])
                else:
                    for victim in decision:
                        open_models.pop(victim)[1].close()
                    admitted += key in opened
                    open_models[key] = load(key)
                    policy.loaded(key)
                    open_models[key][0].runner.infer(feeds[key])
            latencies.append((time.perf_counter() - began) * 1000)
    finally:
        for _served, stack in open_models.values():
            stack.close()
    stats = policy.stats()
    return Outcome(
        latencies,
        stats.hits,
        stats.misses,
        opens,
        reopens,
        admitted,
        stats.evictions,
        stats.refused,
        requests[-1][0] - requests[0][0],
    )


def percentile(values: list[float], q: int) -> float:
    return float(statistics.quantiles(values, n=100, method="inclusive")[q - 1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=1200)
    parser.add_argument("--rate", type=float, default=10.0, help="requests per second of stream time")
    parser.add_argument("--zipf", type=float, default=1.0, help="Zipf exponent s")
    parser.add_argument("--min-residency-s", type=float, default=30.0)
    parser.add_argument("--models-held", type=float, default=4.0, help="budget = this x the mean engine size")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache-dir", type=Path, help="engine cache to reuse (default: a temporary one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        cache = EngineCache(args.cache_dir or folder / "engines")
        began = time.perf_counter()
        specs = build_models(folder, cache, args.seed)
        sizes = [spec.engine_bytes / MB for spec in specs]
        budget_mb = args.models_held * statistics.mean(sizes)
        print(f"10 models built in {time.perf_counter() - began:.1f} s; engine sizes by rank (MB):")
        print("  " + ", ".join(f"{size:.1f}" for size in sizes))
        print(f"budget {budget_mb:.1f} MB (~{args.models_held:g} of 10); {args.requests} requests at {args.rate:g}/s")
        policies = {
            "plain LRU": ModelCacheSettings(memory_mb=budget_mb, min_residency_s=0),
            f"LRU + residency {args.min_residency_s:g} s + frequency": ModelCacheSettings(
                memory_mb=budget_mb, min_residency_s=args.min_residency_s
            ),
        }
        header = (
            f"{'workload':<22} {'policy':<40} {'hit rate':>8} {'p50 ms':>7} {'p99 ms':>7} {'mean ms':>8} "
            f"{'reloads/min':>11} {'kept reloads/min':>16} {'evictions':>9} {'refused':>7}"
        )
        print(header)
        print("-" * len(header))
        static: list[str] = []
        for workload, bursts in (("Zipf", False), ("Zipf + rare bursts", True)):
            requests = stream(args.requests, args.rate, args.zipf, len(specs), args.seed, bursts)
            static.append(f"{workload} {static_hit_rate(specs, budget_mb, requests):.1%}")
            for name, settings in policies.items():
                outcome = run(specs, settings, requests)
                asked = outcome.hits + outcome.misses
                print(
                    f"{workload:<22} {name:<40} {outcome.hits / asked:>8.1%} "
                    f"{percentile(outcome.latencies_ms, 50):>7.1f} {percentile(outcome.latencies_ms, 99):>7.1f} "
                    f"{statistics.mean(outcome.latencies_ms):>8.1f} {outcome.reopens / outcome.stream_s * 60:>11.1f} "
                    f"{outcome.admitted_reopens / outcome.stream_s * 60:>16.1f} "
                    f"{outcome.evictions:>9} {outcome.refused:>7}"
                )

        print(
            "for reference, a static cache of the most asked-for models that fit (by rank): hit rate "
            + ", ".join(static)
        )


def static_hit_rate(specs: list[ModelSpec], budget_mb: float, requests: list[tuple[float, int]]) -> float:
    """The hit rate of loading the most popular models that fit once and never changing them."""
    kept: set[int] = set()
    room = budget_mb * MB
    for index, spec in enumerate(specs):
        if spec.engine_bytes <= room:
            kept.add(index)
            room -= spec.engine_bytes
    return sum(index in kept for _at, index in requests) / len(requests)


if __name__ == "__main__":
    main()
