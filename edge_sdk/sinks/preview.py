"""Watch a pipeline live in a browser: the annotated frames as MJPEG over HTTP, with FPS and latency.

`type: preview` serves, on `host:port` of the process that runs the sinks (the inline loop or the
output stage), a page (`/`), the stream (`/stream.mjpg`, multipart/x-mixed-replace: every browser
plays it in an <img>, no plugin) and its numbers (`/stats.json`, which the page polls). The server is
`preview_server.py` (the standard library's, in a thread; why there), its viewers' mailboxes
`preview_viewers.py`, its address `preview_address.py`.

The pipeline never waits for a viewer. write() draws the frame (annotate.py) and encodes it as JPEG
(OpenCV) only while someone watches, at most `max_fps` times a second, and leaves it in each viewer's
one-slot mailbox; a frame a slow viewer had not taken yet is replaced, dropped and counted (the
stats' `dropped`, and the line the sink logs when it closes).

`port: 0` picks a free port when the settings are read, so the URL is known before the pipeline
starts (`preview_url`) and stays the same across output-stage restarts. A port already in use is one
SinkError before the pipeline starts (`check`). For code that starts a pipeline with a preview:
`preview_url(spec)`, `wait_for_preview(url)` and `open_in_browser(url)`.
"""

from __future__ import annotations

import collections
import logging
import os
import sys
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field, ValidationInfo, field_validator

from edge_sdk.annotate import draw_result
from edge_sdk.core.errors import SinkError
from edge_sdk.core.opencv import import_cv2
from edge_sdk.core.results import Result

from .base import Sink, SinkSpecBase
from .preview_address import bound_socket, free_port, page_url
from .preview_viewers import Viewers

if TYPE_CHECKING:
    from .preview_server import PreviewServer

log = logging.getLogger(__name__)

DEFAULT_PORT = 8090
STATS_WINDOW_S = 2.0
"""FPS and the mean latencies are over the frames of the last this many seconds."""


class PreviewSinkSpec(SinkSpecBase):
    type: Literal["preview"] = Field(
        description="Serve the annotated frames live over HTTP (MJPEG) with a page showing FPS and latency."
    )
    host: str = Field(
        "127.0.0.1", description="Address to listen on: 127.0.0.1 for this machine only, 0.0.0.0 for every interface."
    )
    port: int = Field(
        DEFAULT_PORT,
        ge=0,
        le=65535,
        strict=True,
        description="TCP port, 0..65535; 0 picks a free one when the pipeline file is read (the log says which).",
    )
    quality: int = Field(75, ge=1, le=100, strict=True, description="JPEG quality of the stream, 1..100.")
    max_fps: float = Field(
        15.0,
        gt=0,
        le=120,
        strict=True,
        description="Frames a second sent to viewers at most (fewer are encoded); 0 < max_fps <= 120.",
    )
    source: str | None = Field(
        None, description="Name of the source to show; by default the first one whose frame arrives."
    )

    @field_validator("port")
    @classmethod
    def _pick_free_port(cls, port: int, info: ValidationInfo) -> int:
        try:
            return port or free_port(info.data.get("host", "127.0.0.1"))
        except SinkError as exc:  # a host that is not this machine's: a field error, with the file's line
            raise ValueError(str(exc)) from None

    def build(self, pipeline_name: str) -> PreviewSink:
        return PreviewSink(
            self.host, self.port, quality=self.quality, max_fps=self.max_fps, source=self.source, title=pipeline_name
        )

    def check(self) -> None:
        """One SinkError line when the port is taken (or the address is not this host's); else the URL, logged."""
        probe = bound_socket(self.host, self.port)
        probe.close()
        log.info("preview: watch the pipeline at %s", preview_url(self))


class PreviewSink(Sink):
    """The HTTP server runs from open() to close(); write() only hands frames to its viewers."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        quality: int = 75,
        max_fps: float = 15.0,
        source: str | None = None,
        title: str = "pipeline",
    ):
        self.host, self.port, self.quality, self.source, self.title = host, port, quality, source, title
        self._period = 1.0 / max_fps
        self.name = f"preview:{host}:{port}"
        self._viewers = Viewers()
        self._server: PreviewServer | None = None
        self._lock = threading.Lock()
        self._frames = 0
        self._encoded = 0
        self._encode_seconds = 0.0
        self._last_encoded_at = float("-inf")
        self._recent: collections.deque[tuple[float, float | None, float | None]] = collections.deque()
        """(arrival, total ms, infer ms) of the shown source's frames within STATS_WINDOW_S."""
        self._size: tuple[int, int] | None = None
        self._session = ""
        """New each time the sink opens: the page reconnects its stream when a restarted output stage serves it."""

    @property
    def url(self) -> str:
        return page_url(self.host, self.port)

    def open(self) -> None:
        from .preview_server import PreviewServer  # http.server: only in the process that serves

        self._session = uuid.uuid4().hex[:12]
        self._server = PreviewServer(self.host, self.port, self._viewers, self.stats)
        self.port = self._server.port
        self.name = f"preview:{self.host}:{self.port}"
        log.debug("preview serving %s", self.url)

    def write(self, result: Result, image: np.ndarray) -> None:
        if self.source is None:
            self.source = result.frame.source
        if result.frame.source != self.source:
            return
        now = time.monotonic()
        with self._lock:
            self._frames += 1
            self._size = (image.shape[1], image.shape[0])
            self._recent.append((now, result.timings_ms.get("total"), result.timings_ms.get("infer")))
            while self._recent and now - self._recent[0][0] > STATS_WINDOW_S:
                self._recent.popleft()
        if not self._viewers.watching or now - self._last_encoded_at < self._period:
            return
        self._last_encoded_at = now
        started = time.perf_counter()
        ok, jpeg = import_cv2().imencode(
            ".jpg", draw_result(image, result), [import_cv2().IMWRITE_JPEG_QUALITY, self.quality]
        )
        if not ok:
            raise SinkError(f"{self.name}: OpenCV could not encode a {image.shape[1]}x{image.shape[0]} frame as JPEG")
        self._viewers.publish(jpeg.tobytes())
        with self._lock:
            self._encoded += 1
            self._encode_seconds += time.perf_counter() - started

    def stats(self) -> dict[str, Any]:
        """What /stats.json serves: the shown source's frames, FPS and latency (from each Result's
        timings), and the viewers' counts (`dropped`: frames a slow viewer missed)."""
        now = time.monotonic()
        with self._lock:
            recent = [frame for frame in self._recent if now - frame[0] <= STATS_WINDOW_S]  # a stalled pipeline: 0 FPS
            frames, encoded, encode_seconds, size = self._frames, self._encoded, self._encode_seconds, self._size
        fps = None if not frames else 0.0
        if len(recent) > 1 and recent[-1][0] > recent[0][0]:
            fps = (len(recent) - 1) / (recent[-1][0] - recent[0][0])
        return {
            "session": self._session,
            "pipeline": self.title,
            "source": self.source,
            "frames": frames,
            "fps": fps,
            "latency_ms": _mean([total for _, total, _ in recent]),
            "infer_ms": _mean([infer for _, _, infer in recent]),
            "size": list(size) if size else None,
            "encoded": encoded,
            "encode_ms": encode_seconds * 1000 / encoded if encoded else None,
            "max_fps": 1.0 / self._period,
            **self._viewers.counts(),
        }

    def close(self) -> None:
        if self._server is None:
            return
        self._server.close()
        self._server = None
        counts = self._viewers.counts()
        viewers = counts["viewers_served"]
        summary = (
            f"preview {self.url} closed: {self._frames} frames, {counts['sent']} sent to {viewers} "
            f"viewer{'' if viewers == 1 else 's'}, {counts['dropped']} dropped for slow viewers"
        )
        # A viewer that missed frames should hear of it, and a stage process shows only warnings.
        (log.warning if counts["dropped"] else log.info)(summary)


def preview_url(spec: PreviewSinkSpec) -> str:
    """The page's address for these settings; a wildcard host (0.0.0.0) is reached on this machine's loopback."""
    return page_url(spec.host, spec.port)


def wait_for_preview(url: str, timeout_s: float = 30.0) -> bool:
    """True once the preview at `url` answers (its pipeline's sinks are open); False after `timeout_s`."""
    import urllib.request  # with http.client and ssl: 20 ms that every pipeline would pay

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url.rstrip("/") + "/stats.json", timeout=1.0):
                return True
        except OSError:  # URLError is one
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)


def open_in_browser(url: str) -> bool:
    """Open `url` in the user's browser; False where there is none to open (a headless box, an SSH
    session without a display), so the caller prints the URL instead. Text browsers (lynx, w3m) are
    never started: they would take over the terminal the pipeline logs to."""
    import webbrowser

    has_display = bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    if sys.platform.startswith("linux") and not has_display and not os.environ.get("BROWSER"):
        return False
    try:
        browser = webbrowser.get()
    except webbrowser.Error:
        return False
    if type(browser) is webbrowser.GenericBrowser and not os.environ.get("BROWSER"):
        return False  # a console browser: the only kind webbrowser found
    return browser.open(url, new=2)


def _mean(values: list[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return sum(present) / len(present) if present else None
