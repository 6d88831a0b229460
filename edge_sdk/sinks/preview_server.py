"""The preview's HTTP side: a page, an MJPEG stream and a stats document.

The standard library's ThreadingHTTPServer, in a thread of the process that runs the sinks: three
routes for a few viewers on a local port need no framework, and a framework (aiohttp, Flask) would be
a dependency and an event loop in the output process for nothing. Each connection gets its own thread;
each stream viewer reads its frames from its mailbox (`preview_viewers.py`), never from the pipeline.
"""

from __future__ import annotations

import contextlib
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

from .preview_address import address_family, listen_problem
from .preview_viewers import Viewers

log = logging.getLogger(__name__)

BOUNDARY = b"frame"
JOIN_TIMEOUT_S = 2.0
"""How long close() waits for each connection's thread once its socket is shut."""


class PreviewServer:
    """Serves `/` (the page), `/stream.mjpg` (the frames `viewers` receive) and `/stats.json` (`stats()`)."""

    def __init__(self, host: str, port: int, viewers: Viewers, stats: Callable[[], dict[str, Any]]):
        self.viewers = viewers
        self._stats = stats
        self._page = resources.files(__package__).joinpath("preview_page.html").read_bytes()
        try:
            self._httpd = _Server((host, port), _handler_for(self), address_family(host))
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
