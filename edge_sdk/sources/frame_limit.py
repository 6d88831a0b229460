"""A source that ends after a number of frames (`max_frames` in the pipeline file)."""

from __future__ import annotations

from edge_sdk.core.results import Frame

from .base import Source


class FrameLimit(Source):
    """Wraps a source and ends it once frame index `limit` would be read."""

    def __init__(self, inner: Source, limit: int):
        self.inner = inner
        self.limit = limit
        self.name = inner.name
        self.is_live = inner.is_live

    def open(self) -> None:
        self.inner.open()
        self.fps = self.inner.fps

    @property
    def frames_skipped(self) -> int:
        return self.inner.frames_skipped

    def read(self) -> Frame | None:
        frame = self.inner.read()
        if frame is None or frame.meta.index >= self.limit:
            return None
        return frame

    def close(self) -> None:
        self.inner.close()
