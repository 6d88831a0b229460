"""Frames from the images in a folder, in name order.

A missing folder, or one without image files, raises PermanentSourceError from open(). An image that
cannot be decoded (corrupt, truncated, not really an image, gone since the folder was listed) is
handled by `on_error` (skipped_frames.py): skipped, counted and reported with its path, or the end
of the source with an error naming it. A skipped image is dropped from the list, so a looping folder
counts and reports it once. A folder none of whose images can be decoded raises PermanentSourceError.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edge_sdk.core.errors import PermanentSourceError, SourceError
from edge_sdk.core.opencv import import_cv2
from edge_sdk.core.results import Frame
from edge_sdk.core.status import StatusCallback, ignore_status

from .base import Source
from .skipped_frames import FrameErrorPolicy, SkippedFrames

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff"}


class ImageFolderSource(Source):
    def __init__(
        self,
        folder: Path,
        name: str | None = None,
        loop: bool = False,
        on_error: FrameErrorPolicy = FrameErrorPolicy.SKIP,
        on_status: StatusCallback = ignore_status,
    ):
        self.folder = folder
        self.name = name or folder.name
        self.loop = loop
        self._paths: list[Path] = []
        self._next = 0
        """Position in `_paths` of the next image to read."""
        self._index = 0
        self._opened = False
        self._skipped = SkippedFrames(self.name, on_error, on_status)

    @property
    def frames_skipped(self) -> int:
        return self._skipped.count

    def open(self) -> None:
        if not self.folder.is_dir():
            what = "is a file, not a folder" if self.folder.exists() else "not found"
            raise PermanentSourceError(f"source {self.name}: image folder {what}: {self.folder}")
        try:
            entries = list(self.folder.iterdir())
        except OSError as error:
            raise PermanentSourceError(f"source {self.name}: cannot list image folder {self.folder}: {error}") from None
        self._paths = sorted(p for p in entries if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
        self._next = 0
        if not self._paths:
            raise PermanentSourceError(
                f"source {self.name}: no images ({', '.join(sorted(IMAGE_SUFFIXES))}) in {self.folder}"
            )
        self._opened = True

    def read(self) -> Frame | None:
        if not self._opened:
            raise SourceError(f"source {self.name} is not open")
        while self._paths:
            if self._next >= len(self._paths):
                if not self.loop:
                    return None
                self._next = 0
            path = self._paths[self._next]
            image = self._decode(path)
            if image is not None:
                self._next += 1
                return self._stamp(image)
            self._skipped.check_stop(f"image {path} cannot be decoded")
            del self._paths[self._next]  # the next image moves into this position
            self._skipped.skip(
                1, f"image {path} cannot be decoded: skipped", path=str(path), reason="cannot be decoded"
            )
        if self._index == 0:
            raise PermanentSourceError(
                f"source {self.name}: none of the {self._skipped.count} images in {self.folder} can be decoded"
            )
        return None

    def close(self) -> None:
        self._paths = []
        self._opened = False

    @staticmethod
    def _decode(path: Path) -> np.ndarray | None:
        cv2 = import_cv2()
        try:
            return cv2.imread(str(path))
        except cv2.error:
            return None
