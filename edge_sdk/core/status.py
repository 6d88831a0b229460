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


@dataclass(frozen=True)
class StatusEvent:
    kind: StatusKind
    subject: str
    """What the event is about: a source name, a stage name, a sink name."""
    message: str = ""
    timestamp: float = field(default_factory=time.time)
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "subject": self.subject,
            "message": self.message,
            "timestamp": self.timestamp,
            **self.data,
        }


StatusCallback = Callable[[StatusEvent], None]


def ignore_status(event: StatusEvent) -> None:
    """The null status callback."""
