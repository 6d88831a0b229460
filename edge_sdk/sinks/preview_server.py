"""The preview's HTTP side: a page, an MJPEG stream and a stats document, and one mailbox per viewer.

The standard library's ThreadingHTTPServer, in a thread of the process that runs the sinks: three
routes for a few viewers on a local port need no framework, and a framework (aiohttp, Flask) would be
a dependency and an event loop in the output process for nothing. Each connection gets its own thread;
each stream viewer a one-slot mailbox that the pipeline's `publish` overwrites, so the pipeline never
waits on a socket: a frame a viewer had not taken yet when the next came is dropped and counted.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import socket
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any

from edge_sdk.core.errors import SinkError

log = logging.getLogger(__name__)

BOUNDARY = b"frame"
JOIN_TIMEOUT_S = 2.0
"""How long close() waits for each connection's thread once its socket is shut."""


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


class PreviewServer:
    """Serves `/` (the page), `/stream.mjpg` (the frames `viewers` receive) and `/stats.json` (`stats()`)."""

    def __init__(self, host: str, port: int, viewers: Viewers, stats: Callable[[], dict[str, Any]]):
        self.viewers = viewers
        self._stats = stats
        self._page = resources.files(__package__).joinpath("preview_page.html").read_bytes()
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            self._httpd = _Server((host, port), _handler_for(self), family)
        except OSError as exc:
            raise SinkError(listen_problem(host, port, exc)) from None
        self.port: int = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1}, name=f"preview:{self.port}", daemon=True
        )
        self._thread.start()

    def page(self) -> bytes:
        return self._page

    def stats_json(self) -> bytes:
        return json.dumps(self._stats()).encode()

    def close(self) -> None:
        """Stop accepting, end every viewer's stream, and wait for each connection's thread."""
        self.viewers.close()
        self._httpd.shutdown()
        self._thread.join()
        self._httpd.end_connections()
        self._httpd.server_close()


def listen_problem(host: str, port: int, exc: OSError) -> str:
    """Why the preview cannot listen on host:port, as one line that says what to do."""
    where = f"{host}:{port}"
    if exc.errno == errno.EADDRINUSE:
        return (
            f"preview sink: {where} is already in use (another program or preview listens there); "
            "stop it, or give the preview sink another port (port: 0 picks a free one)"
        )
    if exc.errno == errno.EACCES:
        return f"preview sink: no permission to listen on {where}; ports below 1024 need root, choose port >= 1024"
    if exc.errno == errno.EADDRNOTAVAIL or isinstance(exc, socket.gaierror):
        return (
            f"preview sink: {host} is not an address of this host; "
            "use 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)"
        )
    return f"preview sink: cannot listen on {where}: {exc.strerror or exc}"


class _Server(ThreadingHTTPServer):
    """Keeps each connection's socket and thread, so close() can end a stream blocked on a slow viewer."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], family: socket.AddressFamily):
        self.address_family = family
        self._connections: dict[socket.socket, threading.Thread] = {}
        self._connections_lock = threading.Lock()
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self.process_request_thread, args=(request, client_address), name="preview-viewer", daemon=True
        )
        with self._connections_lock:
            self._connections[request] = thread
        thread.start()

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.pop(request, None)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # socketserver prints a traceback to stderr; a viewer's failure is not the pipeline's business
        log.debug("preview: the request of %s failed", client_address, exc_info=True)

    def end_connections(self) -> None:
        with self._connections_lock:
            connections = list(self._connections.items())
        for sock, _ in connections:
            with contextlib.suppress(OSError):  # already gone
                sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked sending to a viewer that stopped reading
        for _, thread in connections:
            thread.join(JOIN_TIMEOUT_S)
            if thread.is_alive():
                log.warning("preview: a viewer's connection did not end within %.0f s", JOIN_TIMEOUT_S)


def _handler_for(server: PreviewServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "edge-sdk-preview"
        timeout = 30.0
        """Seconds a connection may sit without sending its request (the stream itself waits on frames)."""

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path in ("/", "/index.html"):
                self._send(server.page(), "text/html; charset=utf-8")
            elif path == "/stats.json":
                self._send(server.stats_json(), "application/json")
            elif path == "/stream.mjpg":
                self._stream()
            else:
                self.send_error(HTTPStatus.NOT_FOUND, "the preview serves /, /stream.mjpg and /stats.json")

        def _send(self, body: bytes, content_type: str) -> None:
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def _stream(self) -> None:
            mailbox = server.viewers.join()
            if mailbox is None:
                self.send_error(HTTPStatus.SERVICE_UNAVAILABLE, "the preview is closing")
                return
            try:
                self.send_response(HTTPStatus.OK)
                self.send_header("Content-Type", f"multipart/x-mixed-replace; boundary={BOUNDARY.decode()}")
                self.send_header("Cache-Control", "no-store")
                self.send_header("Connection", "close")
                self.end_headers()
                # Each part ends with the next boundary, so a browser shows a frame as soon as it is whole.
                self.wfile.write(b"--" + BOUNDARY + b"\r\n")
                while not mailbox.closed:
                    frame = mailbox.take(timeout=0.5)
                    if frame is not None:
                        head = b"Content-Type: image/jpeg\r\nContent-Length: %d\r\n\r\n" % len(frame)
                        self.wfile.write(head + frame + b"\r\n--" + BOUNDARY + b"\r\n")
            except OSError:
                pass  # the viewer went away (or close() shut its socket)
            finally:
                server.viewers.leave(mailbox)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("preview %s: %s", self.address_string(), format % args)

    return Handler
