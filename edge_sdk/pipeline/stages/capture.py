"""The capture stage: one process per source, frames into its ring."""

from __future__ import annotations

import contextlib
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edge_sdk.sources.registry import create_source
from edge_sdk.sources.spec import BufferPolicy, SourceSpec

from ..frame_ring import FrameRing, RingLayout, monotonic
from .common import Reporter, RingHandle, StageChannels, child_setup


@dataclass(frozen=True)
class CapturePlan:
    index: int
    owner_id: int
    spec: SourceSpec
    base_dir: Path
    ring: RingHandle
    channels: StageChannels
    resume_after: int
    """Skip frames up to this index (a restarted capture of a file continues where it was)."""
    report_seconds: float


def run_capture(plan: CapturePlan) -> None:
    parent_alive = child_setup()
    ring = FrameRing.attach(plan.ring.name, plan.ring.layout, plan.ring.lock)
    channels = plan.channels
    reporter = Reporter(f"capture:{plan.spec.name or plan.index}", channels.reports, plan.report_seconds)
    live_policy = plan.ring.policy == BufferPolicy.LATEST
    source = create_source(plan.spec, plan.base_dir, on_status=channels.reports.put, stop=channels.stop)
    reporter.stage = f"capture:{source.name}"
    try:
        with source:
            while not channels.stop.is_set() and parent_alive():
                frame = source.read()
                if frame is None:
                    break
                index = frame.meta.index
                if index <= plan.resume_after:
                    continue
                started = time.perf_counter()
                slot = _slot_for_write(ring, plan, live_policy, reporter, parent_alive)
                if slot is None:
                    if channels.stop.is_set() or not parent_alive():
                        break
                    continue  # live source and every slot busy: this frame is dropped (counted)
                image = frame.image
                height, width = image.shape[:2]
                ring.frame_buffer(slot, height, width)[...] = _fit(image, ring.layout)
                ring.commit(slot, index, height, width, monotonic())
                reporter.frames += 1
                reporter.busy += time.perf_counter() - started
                reporter.dropped = ring.dropped
                _wake(channels.tokens, plan.index)
                reporter.tick()
    finally:
        reporter.dropped = ring.dropped
        reporter.tick(force=True)
        ring.close()


def _slot_for_write(
    ring: FrameRing, plan: CapturePlan, live: bool, reporter: Reporter, parent_alive: Callable[[], bool]
) -> int | None:
    while True:
        slot, _dropped_ready = ring.acquire_for_write(plan.owner_id, drop_ready=live)
        if slot is not None:
            return slot
        if live:
            ring.count_dropped()
            return None
        if plan.channels.stop.wait(0.005) or not parent_alive():  # files: back-pressure, nothing is lost
            return None


def _fit(image: np.ndarray, layout: RingLayout) -> np.ndarray:
    if image.shape[0] <= layout.max_height and image.shape[1] <= layout.max_width:
        return image
    raise ValueError(
        f"frame {image.shape[1]}x{image.shape[0]} is larger than the ring's "
        f"{layout.max_width}x{layout.max_height} slots; set the source's max_frame_size"
    )


def _wake(tokens: Any, index: int) -> None:
    # A full queue means the workers are awake with plenty to do; the ring holds the frame anyway.
    with contextlib.suppress(queue.Full):
        tokens.put_nowait(index)
