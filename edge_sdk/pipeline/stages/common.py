"""What every stage process shares: ring handles, channels, a reporter, child set-up."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from edge_sdk.sources.spec import BufferPolicy

from ..frame_ring import FrameRing, RingLayout
from ..messages import StageReport

POLL_SECONDS = 0.05


@dataclass(frozen=True)
class RingHandle:
    """What a child needs to attach to one source's ring."""

    name: str
    layout: RingLayout
    lock: Any
    policy: BufferPolicy


@dataclass(frozen=True)
class StageChannels:
    """Queues and events every stage shares."""

    tokens: Any
    """Capture -> inference: a source index per committed frame (a wake-up; the ring holds the truth)."""
    results: Any
    """Inference -> output: one InferenceDone per frame."""
    reports: Any
    """Every stage -> runtime: StageReport and StatusEvent."""
    stop: Any
    """Set by the runtime: finish what is in flight and exit."""
    captures_done: Any
    """Set by the runtime once every capture stage has finished: workers drain the rings and exit."""
    workers_done: Any
    """Set by the runtime once every inference worker has finished: output drains its queue and exits."""


class Reporter:
    """Counts a stage's work and sends a StageReport every `every` seconds."""

    def __init__(self, stage: str, reports: Any, every: float, extra: Callable[[], dict[str, Any]] = dict):
        self.stage, self.reports, self.every = stage, reports, every
        self.extra = extra
        """Called only when a report goes out, so stage-specific counters cost nothing per frame."""
        self.frames = 0
        self.dropped = 0
        self.busy = 0.0
        self.latencies: list[float] = []
        self._next = time.monotonic() + every

    def tick(self, force: bool = False) -> None:
        if force or time.monotonic() >= self._next:
            report = StageReport(
                self.stage, os.getpid(), self.frames, self.busy, self.dropped, self.latencies, self.extra()
            )
            self.reports.put(report)
            self.latencies = []
            self._next = time.monotonic() + self.every


def child_setup() -> Callable[[], bool]:
    """Ignore Ctrl-C (the runtime drains the pipeline) and return a check that the parent is alive."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = os.getppid()
    return lambda: os.getppid() == parent


def attach_rings(handles: tuple[RingHandle, ...]) -> list[FrameRing]:
    return [FrameRing.attach(h.name, h.layout, h.lock) for h in handles]
