"""A live source that comes back: on a failed open or a lost stream it closes, waits, reopens.

States and what moves between them:

    CONNECTING --open ok--> STREAMING --read raises SourceError--> RECONNECTING --open ok--> STREAMING
    CONNECTING --open raises SourceError--> RECONNECTING --attempts used up--> FAILED
    STREAMING --inner read returns None (a genuine end, e.g. a finite synthetic camera)--> ENDED
    any state --open or read raises a SourceError that is not `retryable`--> FAILED (at once)

Events (edge_sdk.core.status), all with data `state`:
- SOURCE_CONNECTED with the first frame ever (data: attempts it took);
- SOURCE_LOST when a source that delivered frames breaks (data: error);
- SOURCE_RECONNECTING before each wait (data: attempt, delay_s, error);
- SOURCE_RECONNECTED with the first frame after a loss (data: attempts);
- SOURCE_ENDED; SOURCE_FAILED when the policy's max_attempts are used up, or at once for a cause no
  retry can fix (a PermanentSourceError, e.g. a file given as a camera) (data: attempts, error).
This policy is the only retry loop of a live source: the errors it raises are all permanent
(PermanentSourceError, `retryable` False), so whoever runs it does not open it again.
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

from edge_sdk.core.errors import PermanentSourceError, SourceError
from edge_sdk.core.results import Frame
from edge_sdk.core.status import StatusCallback, StatusEvent, StatusKind, ignore_status

from .backoff import BackoffPolicy
from .base import Source
from .skipped_frames import report

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
    PermanentSourceError once the policy's `max_attempts` are used up or the inner source raised a
    permanent one (state FAILED), and again on every later call; open() raises a permanent cause at
    once. Errors other than SourceError (a missing OpenCV, a bug) are not retried.

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
        self._failure: PermanentSourceError | None = None
        """Why the source is FAILED: raised by every read() from then on."""

    @property
    def frames_skipped(self) -> int:
        return self.inner.frames_skipped

    # --- Source ------------------------------------------------------------------------------------

    def open(self) -> None:
        """One connection attempt; a failure is not raised but retried by read() under the policy,
        except a cause no retry can fix (PermanentSourceError), which is raised here."""
        self.state = SourceState.CONNECTING
        self.attempts = 0
        self._pending = None
        self._failure = None
        self._connect()
        if self._failure is not None:
            raise PermanentSourceError(str(self._failure))

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
                raise PermanentSourceError(str(self._failure or f"source {self.name}: failed: {self._last_error}"))

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
            if not error.retryable:
                self._fail_permanently(error)
                return False
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
            if not error.retryable:
                self._fail_permanently(error)
                return None
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
            self._failure = PermanentSourceError(
                f"source {self.name}: gave up after {self.attempts} reconnect attempts; last error: {self._last_error}"
            )
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

    def _fail_permanently(self, error: SourceError) -> None:
        """-> FAILED without a retry: the cause is one no reconnect can fix."""
        self.state = SourceState.FAILED
        message = str(error)
        prefix = f"source {self.name}: "
        self._failure = PermanentSourceError(message if message.startswith(prefix) else prefix + message)
        self._emit(
            StatusKind.SOURCE_FAILED,
            f"failed, not retried (no retry can fix this): {message}",
            attempts=self.attempts,
            error=message,
        )

    def _close_inner(self) -> None:
        try:
            self.inner.close()
        except SourceError as error:  # closing a broken capture must not stop the reconnecting
            log.debug("source %s: close failed: %s", self.name, error)

    def _emit(self, kind: StatusKind, message: str, **data: Any) -> None:
        # report() logs a broken status consumer: it must not take the camera down with it
        report(self.on_status, StatusEvent(kind, self.name, message, data={"state": self.state.value, **data}))
