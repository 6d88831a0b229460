"""Frames from the images in a folder, in name order."""

from __future__ import annotations

from pathlib import Path

from edge_sdk.errors import SourceError
from edge_sdk.results import Frame

from .base import Source
from .opencv import import_cv2

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff"}


class ImageFolderSource(Source):
    def __init__(self, folder: Path, name: str | None = None, loop: bool = False):
        self.folder = folder
        self.name = name or folder.name
        self.loop = loop
        self._paths: list[Path] = []
        self._index = 0

    def open(self) -> None:
        if not self.folder.is_dir():
            raise SourceError(f"image folder not found: {self.folder}")
        self._paths = sorted(p for p in self.folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        if not self._paths:
            raise SourceError(f"no images ({', '.join(sorted(IMAGE_SUFFIXES))}) in {self.folder}")

    def read(self) -> Frame | None:
        if self._index >= len(self._paths) and not self.loop:
            return None
        path = self._paths[self._index % len(self._paths)]
        image = import_cv2().imread(str(path))
        if image is None:
            raise SourceError(f"cannot decode image {path}")
        return self._stamp(image)

    def close(self) -> None:
        self._paths = []
