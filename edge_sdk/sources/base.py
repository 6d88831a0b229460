"""The source role: frames in, one at a time, until the source ends."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from types import TracebackType

import numpy as np

from edge_sdk.core.results import Frame, FrameMeta


class Source(ABC):
    """Open, read frames until None, close. Frames are BGR uint8 HxWx3.

    read() returns None when the source has ended for good (a file, a finite synthetic camera) and
    raises SourceError when it broke (a live stream stalled, a camera went away): a
    ReconnectingSource reopens on the second and stops on the first. open() and the constructor
    raise SourceError too; its `retryable` says whether opening again can help (a
    PermanentSourceError, e.g. a missing file, is never retried).
    """

    name: str
    fps: float | None = None
    is_live: bool = False
    """Frames arrive at the camera's pace whether or not anyone reads them (drop, don't queue)."""
    _index: int = 0
    """Index the next frame gets."""

    @abstractmethod
    def open(self) -> None: ...

    @abstractmethod
    def read(self) -> Frame | None:
        """The next frame, or None when the source has ended; SourceError when it broke."""

    @abstractmethod
    def close(self) -> None: ...

    @property
    def frames_skipped(self) -> int:
        """Frames this source could not decode and passed over (`source.on_error: skip`); see
        skipped_frames.py. Sources that cannot skip a frame report 0."""
        return 0

    def _stamp(self, image: np.ndarray) -> Frame:
        """The next frame of this source: `image` with its index, wall-clock time and size."""
        meta = FrameMeta(self.name, self._index, time.time(), image.shape[1], image.shape[0])
        self._index += 1
        return Frame(meta, image)

    def __enter__(self) -> Source:
        self.open()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __iter__(self) -> Iterator[Frame]:
        while (frame := self.read()) is not None:
            yield frame
