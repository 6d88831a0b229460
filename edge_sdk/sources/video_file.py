"""Frames from a video file through OpenCV.

A file that is missing or that OpenCV cannot open (unknown format; an mp4 truncated before its index)
raises PermanentSourceError from open(). A file that opens but breaks while it is read (OpenCV's read
fails before the CAP_PROP_FRAME_COUNT frames the container announces were read) is handled by
`on_error` (skipped_frames.py):

- skip: after a failed read up to PROBE_READS more reads are tried. If one succeeds, the failed reads
  were a damaged stretch in the middle: they are counted as skipped and reading goes on. If none does,
  the rest of the file is unreadable (a broken tail): the source ends, and every frame from there to
  the announced count is counted as skipped (frames read + frames_skipped == the announced count),
  with one event, e.g. "video ended at frame 157 of 300 (unreadable tail): 143 frames skipped".
- stop: the first failed read ends the source with a PermanentSourceError naming the frame.

A file whose first frame cannot be read at all raises PermanentSourceError under either policy: there
is nothing to skip to. When the container announces no frame count, a failed read is the end. The
count is the container's: an mp4 records it exactly; a format that only estimates it from duration
and frame rate and overshoots would show the difference as a short unreadable tail.
A looping file counts and reports its unreadable frames once, on the first pass.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from edge_sdk.core.errors import PermanentSourceError, SourceError
from edge_sdk.core.opencv import import_cv2
from edge_sdk.core.results import Frame
from edge_sdk.core.status import StatusCallback, ignore_status

from .base import Source
from .skipped_frames import FrameErrorPolicy, SkippedFrames

PROBE_READS = 10
"""Reads tried after a failed one before the rest of the file counts as unreadable."""


class VideoFileSource(Source):
    def __init__(
        self,
        path: Path,
        name: str | None = None,
        loop: bool = False,
        on_error: FrameErrorPolicy = FrameErrorPolicy.SKIP,
        on_status: StatusCallback = ignore_status,
    ):
        self.path = path
        self.name = name or path.stem
        self.loop = loop
        self._capture: Any = None
        self._index = 0
        self._skipped = SkippedFrames(self.name, on_error, on_status)
        self._announced: int | None = None
        """Frames the container says it holds (CAP_PROP_FRAME_COUNT), None when it does not say."""
        self._position = 0
        """Frames read or skipped in this pass over the file."""
        self._first_pass = True

    @property
    def frames_skipped(self) -> int:
        return self._skipped.count

    def open(self) -> None:
        cv2 = import_cv2()
        self.close()
        if not self.path.is_file():
            what = "is a folder, not a video file" if self.path.is_dir() else "not found"
            raise PermanentSourceError(f"source {self.name}: video file {what}: {self.path}")
        try:
            capture = cv2.VideoCapture(str(self.path))
        except cv2.error as error:
            raise PermanentSourceError(f"source {self.name}: OpenCV cannot open video {self.path}: {error}") from None
        if not capture.isOpened():
            capture.release()
            raise PermanentSourceError(
                f"source {self.name}: OpenCV cannot open video {self.path} (unknown format, or a corrupt or truncated file)"
            )
        self._capture = capture
        fps = capture.get(cv2.CAP_PROP_FPS)
        self.fps = float(fps) if fps and fps > 0 else None
        count = capture.get(cv2.CAP_PROP_FRAME_COUNT)
        self._announced = int(count) if count and count > 0 else None
        self._position = 0
        self._first_pass = True

    def read(self) -> Frame | None:
        if self._capture is None:
            raise SourceError(f"source {self.name} is not open")
        image = self._read_image()
        if image is None and self._broken_at():
            image = self._skip_damage()
        if image is None and self.loop and self._index > 0:
            self._capture.set(import_cv2().CAP_PROP_POS_FRAMES, 0)
            self._position, self._first_pass = 0, False
            image = self._read_image()
        if image is None:
            if self._index == 0:
                raise PermanentSourceError(f"source {self.name}: no frame of video {self.path} can be decoded")
            return None
        return self._stamp(image)

    def close(self) -> None:
        if self._capture is not None:
            self._capture.release()
            self._capture = None

    def _read_image(self) -> np.ndarray | None:
        """The next image, or None when OpenCV's read fails; advances the position either way."""
        cv2 = import_cv2()
        try:
            ok, image = self._capture.read()
        except cv2.error:
            ok, image = False, None
        self._position += 1
        if not ok or image is None:
            return None
        return image

    def _broken_at(self) -> bool:
        """Whether the read that just failed came before the announced end: the file is damaged there."""
        return self._announced is not None and self._position <= self._announced

    def _skip_damage(self) -> np.ndarray | None:
        """After a failed read inside the file: the next readable image (the failed reads are counted
        as skipped), or None when the rest of the file is unreadable (the tail is counted)."""
        broken = self._position - 1  # 0-based number of the frame that failed
        announced = self._announced or 0
        self._skipped.check_stop(f"frame {broken} of {announced} of video {self.path} cannot be decoded")
        for _ in range(min(PROBE_READS, announced - self._position)):
            image = self._read_image()
            if image is not None:
                frames = self._position - 1 - broken
                if self._first_pass:
                    last = broken + frames - 1
                    where = f"frame {broken}" if frames == 1 else f"frames {broken}-{last}"
                    self._skipped.skip(
                        frames,
                        f"{where} of {announced} of video {self.path} cannot be decoded: skipped",
                        frame=broken,
                        announced=announced,
                        reason="cannot be decoded",
                    )
                return image
        if self._first_pass and self._index > 0:  # with nothing read at all, read() raises instead
            frames = announced - broken
            self._skipped.skip(
                frames,
                f"video ended at frame {broken} of {announced} (unreadable tail): {frames} frames skipped",
                frame=broken,
                announced=announced,
                reason="unreadable tail",
            )
        return None
