"""The source role: frames in, one at a time, until the source ends."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from types import TracebackType

from edge_sdk.results import Frame


class Source(ABC):
    """Open, read frames until None, close. Frames are BGR uint8 HxWx3."""

    name: str
    fps: float | None = None

    @abstractmethod
    def open(self) -> None: ...

    @abstractmethod
    def read(self) -> Frame | None:
        """The next frame, or None when the source has ended."""

    @abstractmethod
    def close(self) -> None: ...

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
