"""A live source that comes back: on a failed open or a lost stream it closes, waits, reopens.

States and what moves between them:

    CONNECTING --open ok--> STREAMING --read raises SourceError--> RECONNECTING --open ok--> STREAMING
    CONNECTING --open raises SourceError--> RECONNECTING --attempts used up--> FAILED
    STREAMING --inner read returns None (a genuine end, e.g. a finite synthetic camera)--> ENDED

Events (edge_sdk.status), all with data `state`:
- SOURCE_CONNECTED with the first frame ever (data: attempts it took);
- SOURCE_LOST when a source that delivered frames breaks (data: error);
- SOURCE_RECONNECTING before each wait (data: attempt, delay_s, error);
- SOURCE_RECONNECTED with the first frame after a loss (data: attempts);
- SOURCE_ENDED; SOURCE_FAILED when the policy's max_attempts are used up (data: attempts, error).
(Re)connected is announced with a frame, not with a successful open: a server can accept a
connection and then send nothing, and that counts as one more failed attempt.
Every wait happens on `stop`, so setting it makes read() return None at once.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from enum import Enum
from typing import Any, Protocol

from edge_sdk.errors import SourceError
from edge_sdk.results import Frame
from edge_sdk.status import StatusCallback, StatusEvent, StatusKind, ignore_status

from .backoff import BackoffPolicy
from .base import Source

log = logging.getLogger(__name__)


class StopSignal(Protocol):
    """What `stop` must offer: threading.Event and multiprocessing.Event both do."""

    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = ...) -> bool: ...


class SourceState(str, Enum):
    CONNECTING = "connecting"
    STREAMING = "streaming"
    RECONNECTING = "reconnecting"
    ENDED = "ended"
    FAILED = "failed"


class ReconnectingSource(Source):
    """Wraps a live source; frames keep one index sequence across reconnects.

    read() returns the next frame; None when the inner source ended or `stop` was set; it raises
    SourceError once the policy's `max_attempts` are used up (state FAILED), and again on every
    later call. Errors other than SourceError (a missing OpenCV, a bug) are not retried.

    How long a stalled stream takes to count as lost is the inner source's read timeout; a blocked
    OpenCV call cannot be interrupted, so `stop` is honoured between calls, not inside them.
    """

    is_live = True

    def __init__(
        self,
        inner: Source,
        policy: BackoffPolicy | None = None,
        on_status: StatusCallback = ignore_status,
        stop: StopSignal | None = None,
    ):
        self.inner = inner
        self.name = inner.name
        self.fps = inner.fps
        self.policy = policy or BackoffPolicy()
        self.on_status = on_status
        self.stop: StopSignal = stop if stop is not None else threading.Event()
        self.state = SourceState.CONNECTING
        self.attempts = 0
        """Reconnect attempts since the last frame (0 while streaming)."""
        self._ever_streamed = False
        self._pending: StatusKind | None = None
        """CONNECTED or RECONNECTED, sent with the first frame after an open: frames flow again."""
        self._index = 0
        self._last_error = ""

    # --- Source ------------------------------------------------------------------------------------

    def open(self) -> None:
        """One connection attempt; a failure is not raised but retried by read() under the policy."""
        self.state = SourceState.CONNECTING
        self.attempts = 0
        self._pending = None
        self._connect()

    def read(self) -> Frame | None:
        while True:
            if self.stop.is_set():
                return None
            if self.state is SourceState.STREAMING:
                frame = self._read_inner()
                if frame is not None or self.state is SourceState.ENDED:
                    return frame
            elif self.state is SourceState.RECONNECTING:
                if not self._wait_and_reconnect():
                    return None
            elif self.state is SourceState.CONNECTING:
                self._connect()
            elif self.state is SourceState.ENDED:
                return None
            else:
                raise SourceError(
                    f"source {self.name}: gave up after {self.attempts} reconnect attempts; last error: {self._last_error}"
                )

    def close(self) -> None:
        self.inner.close()

    # --- transitions ---------------------------------------------------------------------------------

    def _connect(self) -> None:
        """CONNECTING -> STREAMING, or -> RECONNECTING on a SourceError."""
        if self._open_inner():
            self._pending = StatusKind.SOURCE_CONNECTED

    def _open_inner(self) -> bool:
        """Open the inner source: True and STREAMING, or False and RECONNECTING."""
        try:
            self.inner.open()
        except SourceError as error:
            self._close_inner()
            self._last_error = str(error)
            log.info("source %s: cannot open (attempt %d): %s", self.name, self.attempts, error)
            self.state = SourceState.RECONNECTING
            return False
        self.fps = self.inner.fps
        self.state = SourceState.STREAMING
        return True

    def _read_inner(self) -> Frame | None:
        """One read while STREAMING; None with the state left at RECONNECTING means 'lost, go on'."""
        try:
            frame = self.inner.read()
        except SourceError as error:
            self._last_error = str(error)
            self._close_inner()
            self.state = SourceState.RECONNECTING
            if self._pending is None:  # it had been delivering frames: that is a loss
                self._emit(StatusKind.SOURCE_LOST, f"lost: {error}", error=str(error))
            else:  # opened but never delivered: one more failed attempt
                log.info("source %s: opened but no frame (attempt %d): %s", self.name, self.attempts, error)
            return None
        if frame is None:
            self.state = SourceState.ENDED
            self._emit(StatusKind.SOURCE_ENDED, "ended")
            return None
        if self._pending is not None:
            attempts = self.attempts
            verb = "reconnected" if self._pending is StatusKind.SOURCE_RECONNECTED else "connected"
            self._emit(self._pending, f"{verb} after {attempts} attempts" if attempts else verb, attempts=attempts)
            self._pending = None
            self._ever_streamed = True
        self.attempts = 0
        meta = dataclasses.replace(frame.meta, index=self._index)
        self._index += 1
        return Frame(meta, frame.image)

    def _wait_and_reconnect(self) -> bool:
        """RECONNECTING: wait, reopen. False when `stop` was set during the wait."""
        attempt = self.attempts + 1
        if not self.policy.allows(attempt):
            self.state = SourceState.FAILED
            self._emit(
                StatusKind.SOURCE_FAILED,
                f"gave up after {self.attempts} reconnect attempts: {self._last_error}",
                attempts=self.attempts,
                error=self._last_error,
            )
            return True
        self.attempts = attempt
        delay = self.policy.delay(attempt)
        limit = "" if self.policy.max_attempts is None else f"/{self.policy.max_attempts}"
        self._emit(
            StatusKind.SOURCE_RECONNECTING,
            f"attempt {attempt}{limit} in {delay:.1f} s",
            attempt=attempt,
            delay_s=round(delay, 3),
            error=self._last_error,
        )
        if self.stop.wait(delay) or self.stop.is_set():
            return False
        if self._open_inner():
            self._pending = StatusKind.SOURCE_RECONNECTED if self._ever_streamed else StatusKind.SOURCE_CONNECTED
        return True

    def _close_inner(self) -> None:
        try:
            self.inner.close()
        except SourceError as error:  # closing a broken capture must not stop the reconnecting
            log.debug("source %s: close failed: %s", self.name, error)

    def _emit(self, kind: StatusKind, message: str, **data: Any) -> None:
        event = StatusEvent(kind, self.name, message, data={"state": self.state.value, **data})
        try:
            self.on_status(event)
        except Exception:  # a broken status consumer must not take the camera down with it
            log.exception("source %s: status callback failed on %s", self.name, kind.value)
