"""A capture stage's busy share is the time it works: decoding a file (its reads) and writing the slot,
not waiting for a free slot (back-pressure) nor, for a live source, waiting for the camera."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from edge_sdk.core.results import Frame
from edge_sdk.pipeline.frame_ring import FrameRing, RingLayout
from edge_sdk.pipeline.shared_segments import new_run_token
from edge_sdk.pipeline.stages.capture import CapturePlan, _capture
from edge_sdk.pipeline.stages.common import Reporter, RingHandle
from edge_sdk.sources.base import Source
from edge_sdk.sources.spec import BufferPolicy, SourceSpec

READ_S = 0.02


class SlowSource(Source):
    """`frames` frames of 6x8, each read taking READ_S (a decode, or a camera's wait)."""

    def __init__(self, frames: int, live: bool):
        self.name, self.is_live, self._left = "slow", live, frames

    def open(self) -> None:
        pass

    def read(self) -> Frame | None:
        if self._left == 0:
            return None
        self._left -= 1
        time.sleep(READ_S)
        return self._stamp(np.zeros((6, 8, 3), np.uint8))

    def close(self) -> None:
        pass


class Link:
    """Runs until `seconds` have passed; keeps what the stage reports."""

    def __init__(self, seconds: float):
        self._until = time.monotonic() + seconds

    def running(self) -> bool:
        return time.monotonic() < self._until

    def report(self, report: Any) -> None:
        pass


def busy_after_capture(
    source: Source, slots: int, seconds: float, free_every: float | None = None
) -> tuple[float, int]:
    """Run the capture loop on `source`; with `free_every`, a reader frees the oldest frame that often."""
    ring = FrameRing.create(RingLayout(slots, 6, 8), new_run_token())
    done = threading.Event()

    def slow_reader() -> None:
        while free_every is not None and not done.wait(free_every):
            for info in ring.take_ready(2000, newest=False, limit=1):
                ring.release(info.slot, delivered=True)

    reader = threading.Thread(target=slow_reader)
    reader.start()
    policy = BufferPolicy.LATEST if source.is_live else BufferPolicy.BLOCK
    plan = CapturePlan(
        0, 1, SourceSpec(uri="slow"), Path("."), RingHandle(ring.name, ring.layout, policy), None, -1, 60.0
    )  # type: ignore[arg-type]
    link = Link(seconds)
    reporter = Reporter("capture:slow", link, 60.0)  # type: ignore[arg-type]
    try:
        _capture(source, ring, plan, link, reporter)  # type: ignore[arg-type]
        return reporter.busy, reporter.frames
    finally:
        done.set()
        reader.join()
        ring.close()


def test_a_files_reads_count_as_work() -> None:
    busy, frames = busy_after_capture(SlowSource(5, live=False), slots=8, seconds=10.0)
    assert frames == 5
    assert busy >= 5 * READ_S, f"decoding is the stage's work: busy {busy:.3f} s"


def test_waiting_for_a_free_slot_is_not_work() -> None:
    # 3 slots and a reader that frees one every 0.1 s: after 3 frames each write waits for it (back-pressure)
    started = time.monotonic()
    busy, frames = busy_after_capture(SlowSource(8, live=False), slots=3, seconds=10.0, free_every=0.1)
    took = time.monotonic() - started
    assert frames == 8 and took >= 0.5
    assert busy < 0.5 * took, f"busy {busy:.3f} s of {took:.3f} s, most of it waiting for a free slot"


def test_a_live_sources_wait_for_its_camera_is_not_work() -> None:
    busy, written = busy_after_capture(SlowSource(5, live=True), slots=8, seconds=10.0)
    assert written == 5
    assert busy < 5 * READ_S / 2, f"a live read waits for the camera: busy {busy:.3f} s"
