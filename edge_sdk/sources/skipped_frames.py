"""What a file or folder source does with a frame it cannot decode (`source.on_error`).

`skip` (the default) passes over the frame, counts it in the source's `frames_skipped` and reports a
FRAMES_SKIPPED status event; `stop` ends the source with a PermanentSourceError naming the frame.
A skipped frame takes no frame index: the frames a source delivers are numbered 0, 1, 2, ... without
gaps, so nothing downstream waits for a frame that will never come.
"""

from __future__ import annotations

import logging
from enum import Enum
from typing import Any

from edge_sdk.core.errors import PermanentSourceError
from edge_sdk.core.status import StatusCallback, StatusEvent, StatusKind, ignore_status

log = logging.getLogger(__name__)


class FrameErrorPolicy(str, Enum):
    """What a source does with a corrupt image or an unreadable part of a video."""

    SKIP = "skip"
    """Pass over it, count it (frames_skipped) and report it (status frames_skipped)."""
    STOP = "stop"
    """End the source with an error naming the frame."""


def report(on_status: StatusCallback, event: StatusEvent) -> None:
    """Send `event`; a broken status consumer is logged, never allowed to stop the source."""
    try:
        on_status(event)
    except Exception:
        log.exception("source %s: status callback failed on %s", event.subject, event.kind.value)


class SkippedFrames:
    """One source's count of frames it could not decode, and its policy for them."""

    def __init__(
        self, source: str, policy: FrameErrorPolicy = FrameErrorPolicy.SKIP, on_status: StatusCallback = ignore_status
    ):
        self.source = source
        self.policy = policy
        self.on_status = on_status
        self.count = 0
        """Frames skipped so far."""

    def check_stop(self, what: str) -> None:
        """Under `stop`, raise the error that ends the source at `what` (e.g. 'frame 12 of clip.mp4 ...')."""
        if self.policy is FrameErrorPolicy.STOP:
            raise PermanentSourceError(f"source {self.source}: {what} (source.on_error: stop)")

    def skip(self, frames: int, message: str, **data: Any) -> None:
        """Count `frames` skipped frames and report them with `message` (data: frames, total, and `data`)."""
        self.count += frames
        log.warning("source %s: %s", self.source, message)
        report(
            self.on_status,
            StatusEvent(
                StatusKind.FRAMES_SKIPPED, self.source, message, data={**data, "frames": frames, "total": self.count}
            ),
        )
