"""Typed runtime health events (source lost, reconnected, stage restarted, ...) that can be logged,
shown or published."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class StatusKind(str, Enum):
    SOURCE_CONNECTED = "source_connected"
    SOURCE_LOST = "source_lost"
    SOURCE_RECONNECTING = "source_reconnecting"
    SOURCE_RECONNECTED = "source_reconnected"
    SOURCE_ENDED = "source_ended"
    SOURCE_FAILED = "source_failed"
    FRAMES_DROPPED = "frames_dropped"
    FRAMES_SKIPPED = "frames_skipped"
    STAGE_STARTED = "stage_started"
    STAGE_RESTARTED = "stage_restarted"
    STAGE_FAILED = "stage_failed"
    SINK_FAILED = "sink_failed"
    PIPELINE_STARTED = "pipeline_started"
    """The engines are ready and frames start to flow (the start-up before it is interruptible)."""
    PIPELINE_STOPPED = "pipeline_stopped"
    OFFLOAD_MODE = "offload_mode"
    """Offload (cloud_offload) changed where frames are inferred; the message says to what and why."""
    OFFLOAD_THROUGHPUT = "offload_throughput"
    """Offload started, changed or stopped sending a share of frames away because the edge cannot keep
    pace with the cameras; the message says how much and why."""
    MODEL_BREAKER = "model_breaker"
    """The circuit breaker of a pipeline's `fallback:` model changed state (opened: frames go to the
    fallback; half-open: probing the primary; closed: back on the primary); the message says why."""


@dataclass(frozen=True)
class StatusEvent:
    kind: StatusKind
    subject: str
    """What the event is about: a source name, a stage name, a sink name."""
    message: str = ""
    timestamp: float = field(default_factory=time.time)
    data: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        """The event as one sentence for a person: `source door connected`, `source door lost:
        <error>`, `sink jsonl:out/results.jsonl failed: write: <error>`. The message is used as
        written when it already starts with the event's verb, so no word comes twice."""
        noun, verb = _WORDING[self.kind]
        head = f"{noun} {self.subject}"
        detail = self.message.strip()
        for named in (f"{head}: ", f"{head} "):  # a message that names its own subject
            detail = detail.removeprefix(named)
        detail = detail.removesuffix("; last error: None").removesuffix(": None")  # an error that was never set
        if not verb:
            return f"{head}: {detail}" if detail else head
        if detail in ("", "None", verb):
            return f"{head} {verb}"
        if detail.startswith((f"{verb} ", f"{verb}:", f"{verb},", f"{verb};")):
            return f"{head} {detail}"
        return f"{head} {verb}: {detail}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "subject": self.subject,
            "message": self.message,
            "timestamp": self.timestamp,
            **self.data,
        }


_WORDING: dict[StatusKind, tuple[str, str]] = {
    StatusKind.SOURCE_CONNECTED: ("source", "connected"),
    StatusKind.SOURCE_LOST: ("source", "lost"),
    StatusKind.SOURCE_RECONNECTING: ("source", "reconnecting"),
    StatusKind.SOURCE_RECONNECTED: ("source", "reconnected"),
    StatusKind.SOURCE_ENDED: ("source", "ended"),
    StatusKind.SOURCE_FAILED: ("source", "failed"),
    StatusKind.FRAMES_DROPPED: ("source", ""),  # the message says how many and why
    StatusKind.FRAMES_SKIPPED: ("source", ""),
    StatusKind.STAGE_STARTED: ("stage", "started"),
    StatusKind.STAGE_RESTARTED: ("stage", "restarted"),
    StatusKind.STAGE_FAILED: ("stage", "failed"),
    StatusKind.SINK_FAILED: ("sink", "failed"),
    StatusKind.PIPELINE_STARTED: ("pipeline", "started"),
    StatusKind.PIPELINE_STOPPED: ("pipeline", "stopped"),
    StatusKind.OFFLOAD_MODE: ("offload", "switched"),
    StatusKind.OFFLOAD_THROUGHPUT: ("offload", ""),
    StatusKind.MODEL_BREAKER: ("model breaker", ""),  # the message says opened/half-open/closed and why
}
"""What each kind of event is about and what happened to it, for `StatusEvent.describe`."""

StatusCallback = Callable[[StatusEvent], None]


def ignore_status(event: StatusEvent) -> None:
    """The null status callback."""
