"""Frames from a video file through OpenCV."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edge_sdk.errors import SourceError
from edge_sdk.results import Frame

from .base import Source
from .opencv import import_cv2


class VideoFileSource(Source):
    def __init__(self, path: Path, name: str | None = None, loop: bool = False):
        self.path = path
        self.name = name or path.stem
        self.loop = loop
        self._capture: Any = None
        self._index = 0

    def open(self) -> None:
        cv2 = import_cv2()
        if not self.path.is_file():
            raise SourceError(f"video file not found: {self.path}")
        self._capture = cv2.VideoCapture(str(self.path))
        if not self._capture.isOpened():
            raise SourceError(f"OpenCV cannot open video {self.path} (unknown format or corrupt file)")
        fps = self._capture.get(cv2.CAP_PROP_FPS)
        self.fps = float(fps) if fps and fps > 0 else None

    def read(self) -> Frame | None:
        if self._capture is None:
            raise SourceError(f"source {self.name} is not open")
        ok, image = self._capture.read()
        if not ok and self.loop and self._index > 0:
            self._capture.set(import_cv2().CAP_PROP_POS_FRAMES, 0)
            ok, image = self._capture.read()
        if not ok:
            return None
        return self._stamp(image)

    def close(self) -> None:
        if self._capture is not None:
            self._capture.release()
            self._capture = None
