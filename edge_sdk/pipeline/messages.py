"""The small messages stages send each other. Pixels and raw engine outputs never travel here: only
slot ids, numbers and each frame's decoded Result (frame_steps.py)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from edge_sdk.core.results import FrameMeta, Result


@dataclass(frozen=True)
class InferenceDone:
    """One frame's Result, post-processed by the worker that inferred it; its pixels stay in
    `source_index`'s ring at `slot`. An update (`result.update`, offload's refined result of a frame
    already delivered) holds no slot: `source_index` and `slot` are -1."""

    source_index: int
    slot: int
    holder: int
    """Owner id of the worker that claimed the slot; the output takes the slot over from it."""
    frame: FrameMeta
    """The frame as the worker claimed it from the ring (slot ownership and order go by this, not by
    what a post-processor put in `result`)."""
    captured_at: float
    """Monotonic clock reading when the frame was written to the ring."""
    result: Result
    """Detections and classes, with the timings up to the post-processor (frame_steps.TIMING_FIELDS)."""


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
    """The latency (frame_steps.latency_ms) of each frame finished since the previous report (output stage)."""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StageFailure:
    """Why a stage process is about to exit with an error; the runtime says it once, in one line."""

    stage: str
    message: str
    final: bool
    """True when a restart cannot help (the runtime does not restart the stage)."""
    details: str = ""
    """The traceback of an unexpected error, logged at debug level."""
    pid: int = field(default_factory=os.getpid)
