"""`runtime.latency_slo_ms`: an SLO batcher seeded with the engine's measured batch latencies, and the
check at start that the SLO can be met at all (edge_sdk/serving/batching.py has the policy)."""

from __future__ import annotations

import time

import numpy as np

from edge_sdk.backends.runner import EngineRunner
from edge_sdk.core.tensor_meta import TensorMeta
from edge_sdk.engines.benchmark import make_input
from edge_sdk.engines.engine import PreparedEngine
from edge_sdk.serving.batching import SloBatcher, batch_buckets

SEED_RUNS = 3
"""Timed calls per batch size at start (after one untimed)."""
SEED_FRAME_SIDE = 640
"""The side given to an input's unknown non-batch axes when seeding (raw frames of a folded engine)."""


def fixed_batch_sizes(engine_input: TensorMeta) -> list[int] | None:
    """[N] for an engine built with a fixed batch axis of N (a static profile), None for a dynamic one."""
    first = engine_input.shape[0] if engine_input.shape else None
    return [first] if isinstance(first, int) else None


def seeded_batcher(runner: EngineRunner, engine_input: TensorMeta, slo_ms: float, max_batch: int) -> SloBatcher:
    """A batcher whose latency estimates start from this engine's own calls at every batch size it may
    run (1, 2, 4 ... `max_batch`, or the engine's fixed size): its first decisions are as good as its
    later ones, and no batch meets an engine shape for the first time while frames wait."""
    sizes = fixed_batch_sizes(engine_input)
    batcher = SloBatcher(slo_ms, max_batch, sizes)
    rng = np.random.default_rng(0)
    for size in sizes or batch_buckets(max_batch):
        feed = {meta.name: make_input(meta, size, SEED_FRAME_SIDE, rng) for meta in runner.inputs}
        runner.infer(feed)
        for _ in range(SEED_RUNS):
            started = time.perf_counter()
            runner.infer(feed)
            batcher.ran(size, (time.perf_counter() - started) * 1000)
    return batcher


def check_slo(engine: PreparedEngine, engine_input: TensorMeta, slo_ms: float | None) -> None:
    """SloUnreachable (a ConfigError) when even a batch of one misses `slo_ms` on an idle engine; run
    before any stage starts, so the message comes at once and names the measured best latency. None:
    no target, nothing to check."""
    if slo_ms is None:
        return
    with engine.open() as runner:
        seeded_batcher(runner, engine_input, slo_ms, 1).check_reachable()
