"""The preview's viewers: one single-slot mailbox each, which the pipeline overwrites and the viewer's
connection empties. The pipeline never waits on a viewer: a frame a viewer had not taken yet when the
next one came is replaced, and counted as dropped for that viewer."""

from __future__ import annotations

import threading


class Mailbox:
    """One viewer's next frame: a single slot the pipeline overwrites and the viewer's thread empties."""

    def __init__(self) -> None:
        self._ready = threading.Condition()
        self._frame: bytes | None = None
        self.closed = False
        self.sent = 0
        self.dropped = 0
        """Frames overwritten before this viewer took them: it was slower than the stream."""

    def put(self, frame: bytes) -> None:
        with self._ready:
            if self._frame is not None:
                self.dropped += 1
            self._frame = frame
            self._ready.notify()

    def take(self, timeout: float) -> bytes | None:
        """The newest frame, or None after `timeout` seconds without one or once closed."""
        with self._ready:
            if self._frame is None and not self.closed:
                self._ready.wait(timeout)
            frame, self._frame = self._frame, None
            if frame is not None:
                self.sent += 1
            return frame

    def close(self) -> None:
        with self._ready:
            self.closed = True
            self._ready.notify_all()


class Viewers:
    """The mailboxes of the stream's viewers, and the counts of those that left."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: list[Mailbox] = []
        self._closed = False
        self.served = 0
        self._left_sent = 0
        self._left_dropped = 0

    def join(self) -> Mailbox | None:
        """A mailbox for a new viewer; None once the preview is closing."""
        with self._lock:
            if self._closed:
                return None
            mailbox = Mailbox()
            self._open.append(mailbox)
            self.served += 1
            return mailbox

    def leave(self, mailbox: Mailbox) -> None:
        with self._lock:
            if mailbox in self._open:
                self._open.remove(mailbox)
                self._left_sent += mailbox.sent
                self._left_dropped += mailbox.dropped

    def publish(self, frame: bytes) -> None:
        with self._lock:
            for mailbox in self._open:
                mailbox.put(frame)

    @property
    def watching(self) -> int:
        with self._lock:
            return len(self._open)

    def counts(self) -> dict[str, int]:
        """Viewers now and in all, frames sent to them and frames dropped for slow ones, over the run."""
        with self._lock:
            return {
                "viewers": len(self._open),
                "viewers_served": self.served,
                "sent": self._left_sent + sum(m.sent for m in self._open),
                "dropped": self._left_dropped + sum(m.dropped for m in self._open),
            }

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for mailbox in self._open:
                mailbox.close()
