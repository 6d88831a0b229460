"""An annotated video file."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field
from typing_extensions import Self

from edge_sdk.annotate import draw_result
from edge_sdk.core.errors import SinkError
from edge_sdk.core.opencv import import_cv2
from edge_sdk.core.results import Result

from .base import Sink, SinkSpecBase


class VideoSinkSpec(SinkSpecBase):
    type: Literal["video"] = Field(description="Write frames with boxes and labels drawn to a video file.")
    path: Path = Field(description="Output file (.mp4 or .avi); relative to the pipeline file.")
    fps: float = Field(
        30.0, gt=0, le=1000, strict=True, description="Frame rate written into the file; 0 < fps <= 1000."
    )
    codec: str = Field("mp4v", min_length=4, max_length=4, description="FourCC, e.g. mp4v, MJPG, XVID.")

    def build(self, pipeline_name: str) -> VideoSink:
        return VideoSink(self.path, fps=self.fps, codec=self.codec)

    def after_restart(self, restart: int) -> Self:
        """An mp4 cannot be appended to: a restarted output stage writes name.partN.mp4."""
        path = self.path
        return self.model_copy(update={"path": path.with_name(f"{path.stem}.part{restart}{path.suffix}")})


class VideoSink(Sink):
    """Opens the writer on the first frame, when the frame size is known."""

    def __init__(self, path: Path, fps: float = 30.0, codec: str = "mp4v"):
        self.path = path
        self.fps = fps
        self.codec = codec
        self.name = f"video:{path}"
        self._writer: Any = None
        self._size: tuple[int, int] | None = None

    def open(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SinkError(f"cannot create folder for {self.path}: {exc.strerror}") from None

    def write(self, result: Result, image: np.ndarray) -> None:
        cv2 = import_cv2()
        size = (image.shape[1], image.shape[0])
        if self._writer is None:
            self._writer = cv2.VideoWriter(str(self.path), cv2.VideoWriter_fourcc(*self.codec), self.fps, size)
            if not self._writer.isOpened():
                self._writer = None
                raise SinkError(f"OpenCV cannot write {self.codec} video to {self.path}")
            self._size = size
        if size != self._size:
            image = cv2.resize(image, self._size)
        self._writer.write(draw_result(image, result))

    def close(self) -> None:
        if self._writer is not None:
            self._writer.release()
            self._writer = None
