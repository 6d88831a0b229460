"""The inference stage: workers that batch frames across sources and run the engine."""

from __future__ import annotations

import queue
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from edge_sdk.engines.engine import PreparedEngine
from edge_sdk.results import FrameMeta
from edge_sdk.sources.spec import BufferPolicy

from ..frame_ring import FrameRing, SlotInfo, monotonic
from ..messages import InferenceDone
from ..preprocess import FrameFeed, PreprocessSpec, frame_feed
from .common import POLL_SECONDS, Reporter, RingHandle, StageChannels, attach_rings, child_setup


@dataclass(frozen=True)
class InferencePlan:
    worker: int
    owner_id: int
    output_owner_id: int
    engine: PreparedEngine
    threads: int | None
    input_name: str
    preprocess: PreprocessSpec
    source_names: tuple[str, ...]
    rings: tuple[RingHandle, ...]
    channels: StageChannels
    batch_size: int
    batch_timeout: float
    report_seconds: float


def run_inference(plan: InferencePlan) -> None:
    parent_alive = child_setup()
    rings = attach_rings(plan.rings)
    channels = plan.channels
    reporter = Reporter(f"inference:{plan.worker}", channels.reports, plan.report_seconds)
    runner = plan.engine.open(threads=plan.threads, share_cpu=True)
    runner.activate()
    model_input = next(meta for meta in runner.inputs if meta.name == plan.input_name)
    feed = frame_feed(plan.preprocess, model_input)
    next_source = 0
    try:
        # On stop, what was already inferred still reaches the sinks; frames waiting in rings do not.
        while parent_alive() and not channels.stop.is_set():
            batch = _gather(rings, plan, next_source)
            next_source = (next_source + 1) % len(rings)
            if batch:
                started = time.perf_counter()
                _infer_batch(batch, rings, plan, runner, feed)
                reporter.frames += len(batch)
                reporter.busy += time.perf_counter() - started
                reporter.tick()
                continue
            if channels.captures_done.is_set() and not _any_ready(rings):
                break
            try:
                channels.tokens.get(timeout=POLL_SECONDS)
            except queue.Empty:
                reporter.tick()
    finally:
        reporter.tick(force=True)
        runner.deactivate()
        for ring in rings:
            ring.close()


def _gather(rings: list[FrameRing], plan: InferencePlan, first: int) -> list[tuple[int, SlotInfo]]:
    """Claim up to batch_size frames across sources; wait up to batch_timeout to fill a batch."""
    batch: list[tuple[int, SlotInfo]] = []
    deadline = time.monotonic() + plan.batch_timeout
    while True:
        for offset in range(len(rings)):
            index = (first + offset) % len(rings)
            room = plan.batch_size - len(batch)
            if room <= 0:
                return batch
            newest = plan.rings[index].policy == BufferPolicy.LATEST
            batch += [(index, info) for info in rings[index].take_ready(plan.owner_id, newest, room)]
        if len(batch) >= plan.batch_size or not batch or time.monotonic() >= deadline:
            return batch
        time.sleep(0.0005)


def _any_ready(rings: list[FrameRing]) -> bool:
    return any(ring.states()["ready"] for ring in rings)


def _infer_batch(
    batch: list[tuple[int, SlotInfo]],
    rings: list[FrameRing],
    plan: InferencePlan,
    runner: Any,
    feed: FrameFeed,
) -> None:
    started = time.perf_counter()
    tensors = [feed(rings[index].frame(info)) for index, info in batch]
    # Frames of different sizes (raw frames for a folded engine, or no resize) cannot share one tensor.
    groups: dict[tuple[int, ...], list[int]] = {}
    for position, tensor in enumerate(tensors):
        groups.setdefault(tensor.shape, []).append(position)
    preprocessed = time.perf_counter()
    outputs_per_frame: list[dict[str, np.ndarray]] = [{} for _ in batch]
    for positions in groups.values():
        stacked = np.concatenate([tensors[p] for p in positions]) if len(positions) > 1 else tensors[positions[0]]
        outputs = runner.infer({plan.input_name: stacked})
        for row, position in enumerate(positions):
            outputs_per_frame[position] = {name: np.array(value[row]) for name, value in outputs.items()}
    inferred = time.perf_counter()
    timings = {
        "preprocess": (preprocessed - started) * 1000 / len(batch),
        "infer": (inferred - preprocessed) * 1000 / len(batch),
        "batch": float(len(batch)),
    }
    now_wall, now_mono = time.time(), monotonic()
    for (index, info), outputs in zip(batch, outputs_per_frame, strict=True):
        meta = FrameMeta(
            plan.source_names[index], info.seq, now_wall - (now_mono - info.timestamp), info.width, info.height
        )
        rings[index].hand_over(info.slot, plan.output_owner_id)
        done = InferenceDone(
            index, info.slot, meta, info.timestamp, feed.geometry(info.width, info.height), outputs, timings
        )
        if not _put_result(plan.channels, done):
            rings[index].release(info.slot)


def _put_result(channels: StageChannels, done: InferenceDone, patience: float = 2.0) -> bool:
    """Queue a result for the output stage; when stopping and the output stage takes nothing (it
    died), give up after `patience` seconds instead of blocking the drain."""
    waited = 0.0
    while True:
        try:
            channels.results.put(done, timeout=POLL_SECONDS)
            return True
        except queue.Full:
            if channels.stop.is_set():
                waited += POLL_SECONDS
                if waited >= patience:
                    return False
