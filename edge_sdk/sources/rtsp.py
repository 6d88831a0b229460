"""Frames from an RTSP(S) camera or server through OpenCV's FFMPEG backend.

TCP transport is the default (no lost packets, passes NAT and firewalls); `transport=udp` switches
to RTP over UDP. `open_timeout_ms` and `read_timeout_ms` bound how long opening and each read may
block. These three options (options.RtspOptions) may be written in the URI query: they are removed
from the URL, and every other query parameter (e.g. `channel=1&subtype=0`) goes to the camera unchanged.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Collection
from types import ModuleType
from typing import Any
from urllib.parse import SplitResult, unquote_plus, urlsplit, urlunsplit

from edge_sdk.core.errors import SourceConfigError
from edge_sdk.core.opencv import timeout_params
from edge_sdk.sources.live_capture import LiveCaptureSource

TRANSPORTS = ("tcp", "udp")
DEFAULT_OPEN_TIMEOUT_MS = 10_000
DEFAULT_READ_TIMEOUT_MS = 5_000
FFMPEG_OPTIONS_ENV = "OPENCV_FFMPEG_CAPTURE_OPTIONS"

# OpenCV reads the FFMPEG options from the environment while it opens; one open at a time sets them.
_ENV_LOCK = threading.Lock()


def redact_url(url: str) -> str:
    """The URL with any password replaced by ***, for messages and status events."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    try:
        port: int | str | None = parts.port
    except ValueError:  # a malformed port: keep what was written, the password is still removed
        port = parts.netloc.rsplit(":", 1)[-1]
    if port is not None:
        host = f"{host}:{port}"
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{host}"))


def ffmpeg_capture_options(existing: str | None, transport: str) -> str:
    """OPENCV_FFMPEG_CAPTURE_OPTIONS ('key;value|key;value') with rtsp_transport set, others kept."""
    pairs = [item for item in (existing or "").split("|") if item and not item.startswith("rtsp_transport;")]
    return "|".join([f"rtsp_transport;{transport}", *pairs])


class RtspSource(LiveCaptureSource):
    def __init__(
        self,
        url: str,
        name: str | None = None,
        transport: str = "tcp",
        open_timeout_ms: int | None = DEFAULT_OPEN_TIMEOUT_MS,
        read_timeout_ms: int | None = DEFAULT_READ_TIMEOUT_MS,
    ):
        if transport not in TRANSPORTS:
            raise SourceConfigError(
                f"rtsp source: expected transport tcp or udp, got '{transport}' for {redact_url(url)}"
            )
        parts = urlsplit(url)
        if parts.scheme not in ("rtsp", "rtsps") or not parts.hostname:
            raise SourceConfigError(
                f"rtsp source: expected rtsp://HOST[:PORT]/PATH or rtsps://..., got {redact_url(url)}"
            )
        try:
            port = parts.port
        except ValueError:  # not a number, or past 65535
            port = -1
        if port is not None and not 1 <= port <= 65535:
            raise SourceConfigError(
                f"rtsp source: expected a port number from 1 to 65535 after the host, got {redact_url(url)}"
            )
        super().__init__(name or _default_name(parts), f"RTSP stream {redact_url(url)} over {transport.upper()}")
        self.url = url
        self.transport = transport
        self.open_timeout_ms = open_timeout_ms
        self.read_timeout_ms = read_timeout_ms

    def _open_capture(self, cv2: ModuleType) -> Any:
        params = timeout_params(cv2, self.open_timeout_ms, self.read_timeout_ms)
        with _ENV_LOCK:
            previous = os.environ.get(FFMPEG_OPTIONS_ENV)
            os.environ[FFMPEG_OPTIONS_ENV] = ffmpeg_capture_options(previous, self.transport)
            try:
                if params:
                    return cv2.VideoCapture(self.url, cv2.CAP_FFMPEG, params)
                return cv2.VideoCapture(self.url, cv2.CAP_FFMPEG)
            finally:
                if previous is None:
                    del os.environ[FFMPEG_OPTIONS_ENV]
                else:
                    os.environ[FFMPEG_OPTIONS_ENV] = previous

    def _open_failed_message(self) -> str:
        return (
            f"cannot open {self.description}: unreachable, refused, wrong path or credentials, "
            f"or no video within {self.open_timeout_ms} ms"
        )


def camera_url(uri: str, sdk_keys: Collection[str]) -> str:
    """The URL the camera is asked for: `uri` without the query parameters named in `sdk_keys` (the
    SDK's own, see options.RtspOptions); the camera's own parameters stay byte for byte, since some
    firmwares are picky about their encoding."""
    parts = urlsplit(uri)
    camera_query = [
        item for item in parts.query.split("&") if item and unquote_plus(item.split("=", 1)[0]) not in sdk_keys
    ]
    return urlunsplit(parts._replace(query="&".join(camera_query)))


def _default_name(parts: SplitResult) -> str:
    segments = [s for s in parts.path.split("/") if s]
    return segments[-1] if segments else (parts.hostname or "rtsp")
