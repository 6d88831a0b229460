"""The shared part of live OpenCV sources (network streams, camera devices, GStreamer pipelines)."""

from __future__ import annotations

from abc import abstractmethod
from types import ModuleType
from typing import Any

from edge_sdk.core.errors import SourceError
from edge_sdk.core.opencv import import_cv2
from edge_sdk.core.results import Frame
from edge_sdk.sources.base import Source


class LiveCaptureSource(Source):
    """A live cv2.VideoCapture. A live stream has no end: read() never returns None, it raises
    SourceError when no frame comes (stalled past the read timeout, camera gone, server down), so a
    ReconnectingSource can tell a loss from an end.
    """

    is_live = True

    def __init__(self, name: str, description: str):
        self.name = name
        self.description = description
        """What the source is, for messages (credentials removed)."""
        self._capture: Any = None
        self._index = 0

    @abstractmethod
    def _open_capture(self, cv2: ModuleType) -> Any:
        """A cv2.VideoCapture for the target (opened or not; open() checks)."""

    def _open_failed_message(self) -> str:
        return f"OpenCV cannot open {self.description}"

    def open(self) -> None:
        cv2 = import_cv2()
        self.close()
        try:
            capture = self._open_capture(cv2)
        except cv2.error as error:
            raise SourceError(f"{self._open_failed_message()}: {error}") from None
        if not capture.isOpened():
            capture.release()
            raise SourceError(self._open_failed_message())
        self._capture = capture
        fps = capture.get(cv2.CAP_PROP_FPS)
        self.fps = float(fps) if fps and 0 < fps < 1000 else None

    def read(self) -> Frame | None:
        if self._capture is None:
            raise SourceError(f"source {self.name} ({self.description}) is not open")
        cv2 = import_cv2()
        try:
            ok, image = self._capture.read()
        except cv2.error as error:
            raise SourceError(f"{self.description}: reading a frame failed: {error}") from None
        if not ok or image is None:
            raise SourceError(f"{self.description}: no frame (the stream stalled or stopped, or the device went away)")
        return self._stamp(image)

    def close(self) -> None:
        if self._capture is not None:
            self._capture.release()
            self._capture = None
