"""The small messages stages send each other. Pixels never travel here: only slot ids and numbers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edge_sdk.results import FrameMeta

from .geometry import InputGeometry


@dataclass(frozen=True)
class InferenceDone:
    """One frame's raw engine outputs; its pixels stay in `source_index`'s ring at `slot`."""

    source_index: int
    slot: int
    frame: FrameMeta
    captured_at: float
    """Monotonic clock reading when the frame was written to the ring."""
    geometry: InputGeometry
    outputs: dict[str, np.ndarray]
    timings_ms: dict[str, float]


@dataclass(frozen=True)
class StageReport:
    """Periodic counters from one stage process, for --stats, Prometheus and the run summary."""

    stage: str
    pid: int
    frames: int
    """Frames handled since the stage (process) started."""
    busy_seconds: float
    """Time spent working (not waiting) since the stage started."""
    dropped: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    """Capture-to-result latencies of the frames finished since the previous report (output stage)."""
    extra: dict[str, Any] = field(default_factory=dict)
