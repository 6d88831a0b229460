"""What the runtime shows of a running pipeline: one view per stage, and the live snapshot that
--stats, Prometheus and on_snapshot callbacks get."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .messages import StageReport

if TYPE_CHECKING:
    from .frame_ring import FrameRing


@dataclass
class StageView:
    """What --stats shows for one stage."""

    name: str
    kind: str
    pid: int | None = None
    restarts: int = 0
    frames: int = 0
    fps: float = 0.0
    busy: float = 0.0
    """Fraction of wall time spent working over the last report interval."""
    dropped: int = 0
    state: str = "starting"
    offload: dict[str, Any] | None = None
    """An inference stage's dispatch counters when the pipeline offloads (cloud_offload's agent):
    mode, frames per place computed, fallbacks, link estimate, cloud times."""
    breaker: dict[str, Any] | None = None
    """An inference stage's circuit breaker when the pipeline has a `fallback:` model: state, frames
    per model, openings, primary errors."""
    batching: dict[str, Any] | None = None
    """An inference stage's SLO batcher under runtime.latency_slo_ms: target, mean batch, frames shed,
    padded rows of a fixed-batch engine."""
    _last: tuple[float, int, float, int] | None = None
    """(when, frames, busy seconds, pid) of the previous report."""
    _earlier_frames: int = 0
    """Frames done by processes of this stage that have since been replaced."""

    def update(self, report: StageReport) -> None:
        now = time.monotonic()
        if self._last and self._last[3] == report.pid:
            then, frames, busy, _pid = self._last
            elapsed = max(now - then, 1e-6)
            self.fps = (report.frames - frames) / elapsed
            self.busy = min(1.0, (report.busy_seconds - busy) / elapsed)
        elif self._last:  # the first report of a restarted process
            self._earlier_frames += self._last[1]
        self._last = (now, report.frames, report.busy_seconds, report.pid)
        self.frames = self._earlier_frames + report.frames
        self.pid, self.dropped, self.state = report.pid, report.dropped, "running"
        self.offload = report.extra.get("dispatch") or None
        self.breaker = report.extra.get("breaker") or None
        self.batching = report.extra.get("batching") or None


@dataclass
class RuntimeSnapshot:
    """The live picture: stages, rings, recent latency."""

    stages: list[StageView]
    rings: dict[str, dict[str, int]]
    latency_p50_ms: float
    latency_p99_ms: float
    elapsed: float

    @classmethod
    def of(
        cls, stages: list[StageView], rings: Mapping[str, FrameRing], recent: Sequence[float], elapsed: float
    ) -> RuntimeSnapshot:
        """The snapshot of these stages and rings, with the latency percentiles of `recent` results (ms)."""
        latencies = list(recent) or [float("nan")]
        return cls(
            stages=stages,
            rings={name: ring.states() | {"dropped": ring.dropped} for name, ring in rings.items()},
            latency_p50_ms=float(np.percentile(latencies, 50)),
            latency_p99_ms=float(np.percentile(latencies, 99)),
            elapsed=elapsed,
        )
