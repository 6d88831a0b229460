"""The capture stage: one process per source, frames into its ring."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edge_sdk.core.errors import PermanentSourceError
from edge_sdk.sources.base import Source
from edge_sdk.sources.registry import create_source
from edge_sdk.sources.spec import BufferPolicy, SourceSpec

from ..frame_ring import FrameRing, RingLayout, monotonic
from .common import IDLE_SECONDS, Reporter, RingHandle, StageChannels, StageLink, failures_reported


@dataclass(frozen=True)
class CapturePlan:
    index: int
    owner_id: int
    spec: SourceSpec
    base_dir: Path
    ring: RingHandle
    channels: StageChannels
    resume_after: int
    """The last frame a previous process of this stage put in the ring (-1 at the first start): a
    file skips up to it, a live source numbers its frames on from it."""
    report_seconds: float


def run_capture(plan: CapturePlan) -> None:
    link = StageLink(plan.channels, "capture")
    stage = f"capture:{plan.spec.name or plan.index}"
    with failures_reported(link, stage):
        ring = FrameRing.attach(plan.ring.name, plan.ring.layout)
        reporter = Reporter(stage, link, plan.report_seconds)
        try:
            source = create_source(plan.spec, plan.base_dir, on_status=link.report, stop=link.control.stop)
            reporter.stage = f"capture:{source.name}"
            with source:
                _capture(source, ring, plan, link, reporter)
        finally:
            reporter.dropped = ring.dropped
            reporter.tick(force=True)
            ring.close()
            link.close()


def _capture(source: Source, ring: FrameRing, plan: CapturePlan, link: StageLink, reporter: Reporter) -> None:
    live = plan.ring.policy == BufferPolicy.LATEST
    skipped = 0
    while link.running():
        reading = time.perf_counter()
        frame = source.read()
        # A file or folder works while it reads (decoding); a live source mostly waits for its camera.
        worked = 0.0 if live else time.perf_counter() - reading
        if source.frames_skipped > skipped:
            ring.count_skipped(source.frames_skipped - skipped)
            skipped = source.frames_skipped
        if frame is None:
            return
        index = frame.meta.index
        if live:
            index += plan.resume_after + 1
        elif index <= plan.resume_after:
            continue
        slot = _slot_for_write(ring, plan, live, link)  # waiting here is back-pressure, not work
        if slot is None:
            continue  # live source and every slot busy (the frame is counted as dropped), or stopping
        started = time.perf_counter()
        image = frame.image
        height, width = image.shape[:2]
        ring.frame_buffer(slot, height, width)[...] = _fit(image, ring.layout, source.name)
        ring.commit(slot, index, height, width, monotonic())
        reporter.frames += 1
        reporter.busy += worked + time.perf_counter() - started
        reporter.dropped = ring.dropped
        reporter.tick()


def _slot_for_write(ring: FrameRing, plan: CapturePlan, live: bool, link: StageLink) -> int | None:
    while True:
        slot, _dropped_ready = ring.acquire_for_write(plan.owner_id, drop_ready=live)
        if slot is not None:
            return slot
        if live:
            ring.count_dropped()
            return None
        if not link.running():  # files: back-pressure, nothing is lost
            return None
        time.sleep(IDLE_SECONDS)


def _fit(image: np.ndarray, layout: RingLayout, source: str) -> np.ndarray:
    if image.shape[0] <= layout.max_height and image.shape[1] <= layout.max_width:
        return image
    raise PermanentSourceError(
        f"source {source}: frame {image.shape[1]}x{image.shape[0]} is larger than the ring's "
        f"{layout.max_width}x{layout.max_height} slots; raise runtime.max_frame_size"
    )
