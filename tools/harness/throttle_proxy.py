"""A TCP proxy that makes loopback behave like a slow link: the offload test bed (issue 13).

Real bytes, real sockets: clients connect to the proxy's port and it forwards to `upstream` (a
broker), each direction through a delay line (added delay and jitter, never reordering bytes) and a
token bucket shared by every connection in that direction (the link's bandwidth). `stall()` holds
every byte until `resume()`; `cut()` drops every connection and refuses new ones until `restore()`;
`follow(schedule)` applies changes at given times from a thread, for benches and tests;
`bytes_up` and `bytes_down` count what it carried each way.

Test and bench support only: the library never imports it.
"""

from __future__ import annotations

import contextlib
import queue
import random
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

CHUNK = 16 * 1024
PACKET = 1500
"""Bytes released at a time: an Ethernet frame's payload, so a message's tail waits its turn."""
BURST_S = 0.002
"""Tokens saved up while idle, in seconds of bandwidth: a link's queue, not a message's worth."""


@dataclass
class LinkShape:
    bandwidth_bps: float | None = None
    """Bits per second each way; None is unlimited."""
    delay_s: float = 0.0
    """Added one-way delay."""
    jitter_s: float = 0.0
    """Up to this much more delay per chunk, uniformly drawn (bytes keep their order)."""


class _TokenBucket:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tokens = 0.0
        self._at = time.monotonic()
        self.carried = 0
        """Bytes let through so far."""

    def take(self, nbytes: int, shape: LinkShape) -> None:
        """Block until `nbytes` may go at the shape's bandwidth (a burst of at most BURST_S is allowed)."""
        while True:
            bandwidth = shape.bandwidth_bps
            if bandwidth is None:
                with self._lock:
                    self.carried += nbytes
                return
            rate = bandwidth / 8
            with self._lock:
                now = time.monotonic()
                self._tokens = min(max(rate * BURST_S, nbytes), self._tokens + (now - self._at) * rate)
                self._at = now
                if self._tokens >= nbytes:
                    self._tokens -= nbytes
                    self.carried += nbytes
                    return
                wait = (nbytes - self._tokens) / rate
            time.sleep(min(wait, 0.01))


class ThrottlingProxy:
    def __init__(self, upstream: tuple[str, int], shape: LinkShape | None = None, host: str = "127.0.0.1"):
        self.upstream = upstream
        self.shape = shape or LinkShape()
        self._buckets = (_TokenBucket(), _TokenBucket())  # to upstream, to the client
        self._listener = socket.create_server((host, 0))
        self.port: int = self._listener.getsockname()[1]
        self._sockets: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._flowing = threading.Event()
        self._flowing.set()
        self._cut = False
        self._closed = False
        self._random = random.Random(0)
        threading.Thread(target=self._accept, name="throttle-accept", daemon=True).start()

    # -- what a test or bench changes -----------------------------------------------------------------

    def set(
        self, bandwidth_bps: float | None = None, delay_s: float | None = None, jitter_s: float | None = None
    ) -> None:
        """Change the link now (every connection, both directions); an argument left out keeps its value."""
        self.shape = LinkShape(
            bandwidth_bps if bandwidth_bps is not None else self.shape.bandwidth_bps,
            delay_s if delay_s is not None else self.shape.delay_s,
            jitter_s if jitter_s is not None else self.shape.jitter_s,
        )

    @property
    def bytes_up(self) -> int:
        """Bytes carried to the upstream (the broker) so far, over every connection."""
        return self._buckets[0].carried

    @property
    def bytes_down(self) -> int:
        """Bytes carried back to the clients so far."""
        return self._buckets[1].carried

    def stall(self) -> None:
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    def cut(self) -> None:
        """Drop every connection (as a link that went down) and refuse new ones until restore()."""
        self._cut = True
        self._drop_all()

    def restore(self) -> None:
        self._cut = False

    def follow(self, schedule: Sequence[tuple[float, dict[str, float | None]]]) -> threading.Thread:
        """Apply `set(**changes)` at each (seconds from now, changes), in a thread it returns."""

        def run() -> None:
            started = time.monotonic()
            for at, changes in schedule:
                time.sleep(max(0.0, started + at - time.monotonic()))
                if self._closed:
                    return
                self.set(**changes)

        thread = threading.Thread(target=run, name="throttle-schedule", daemon=True)
        thread.start()
        return thread

    def close(self) -> None:
        self._closed = True
        self._flowing.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        self._drop_all()

    def __enter__(self) -> ThrottlingProxy:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- forwarding -----------------------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._cut:
                client.close()
                continue
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            # A link forwards bytes as they come: without this, Nagle's algorithm holds a message's
            # tail back for the peer's delayed ACK, 40 ms on Linux, which no real link adds.
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._sockets |= {client, server}
            for source, target, bucket in ((client, server, self._buckets[0]), (server, client, self._buckets[1])):
                lane: queue.Queue[tuple[float, bytes] | None] = queue.Queue()
                threading.Thread(target=self._read, args=(source, lane), daemon=True, name="throttle-read").start()
                threading.Thread(
                    target=self._deliver, args=(lane, target, bucket), daemon=True, name="throttle-send"
                ).start()

    def _read(self, source: socket.socket, lane: queue.Queue[tuple[float, bytes] | None]) -> None:
        try:
            while data := source.recv(CHUNK):
                lane.put((time.monotonic(), data))
        except OSError:
            pass
        lane.put(None)

    def _deliver(
        self, lane: queue.Queue[tuple[float, bytes] | None], target: socket.socket, bucket: _TokenBucket
    ) -> None:
        released = 0.0
        try:
            while (item := lane.get()) is not None:
                arrived, data = item
                shape = self.shape
                released = max(released, arrived + shape.delay_s + self._random.uniform(0, shape.jitter_s))
                time.sleep(max(0.0, released - time.monotonic()))
                self._flowing.wait()
                for start in range(0, len(data), PACKET):  # paced packet by packet, as a link does
                    piece = data[start : start + PACKET]
                    bucket.take(len(piece), self.shape)
                    target.sendall(piece)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                target.shutdown(socket.SHUT_WR)

    def _drop_all(self) -> None:
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
