"""Frames made by panning and zooming across a still image: a camera stand-in with real content."""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

from edge_sdk.core.errors import PermanentSourceError
from edge_sdk.core.opencv import import_cv2
from edge_sdk.core.results import Frame

from .base import Source


class PanZoomSource(Source):
    """A virtual camera that sweeps across `image` on a smooth path, zooming in and out.

    Without an image it renders a moving colour gradient, for pipelines that only need pixels.
    `fps` paces reading like a live camera when `realtime` is set.
    """

    def __init__(
        self,
        image: Path | None,
        frames: int = 300,
        size: tuple[int, int] = (640, 480),
        fps: float = 30.0,
        name: str = "synthetic",
        loop: bool = False,
        realtime: bool = False,
    ):
        self.image_path = image
        self.frames = frames
        self.size = size
        self.fps = fps
        self._period = 1.0 / fps
        self.name = name
        self.loop = loop
        self.realtime = realtime
        self.is_live = realtime
        self._still: np.ndarray | None = None
        self._index = 0
        self._next_due = 0.0

    def open(self) -> None:
        if self.image_path is not None:
            still = import_cv2().imread(str(self.image_path))
            if still is None:
                raise PermanentSourceError(
                    f"source {self.name}: cannot read image for synthetic source: {self.image_path}"
                )
            self._still = still
        self._next_due = time.monotonic()

    def read(self) -> Frame | None:
        if self._index >= self.frames and not self.loop:
            return None
        if self.realtime:
            delay = self._next_due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            self._next_due += self._period
        image = self.render(self._index % self.frames)
        return self._stamp(image)

    def render(self, step: int) -> np.ndarray:
        width, height = self.size
        phase = 2 * math.pi * step / max(self.frames, 1)
        if self._still is None:
            x = np.linspace(0, 255, width, dtype=np.float32)[None, :]
            y = np.linspace(0, 255, height, dtype=np.float32)[:, None]
            shift = 127 * (1 + math.sin(phase))
            planes = [(x + shift) % 256 + 0 * y, (y + shift) % 256 + 0 * x, (x + y) / 2 % 256]
            return np.dstack(planes).astype(np.uint8)
        cv2 = import_cv2()
        still_h, still_w = self._still.shape[:2]
        aspect = width / height
        # Crop height swings between 55% and 100% of the image; the centre drifts on a Lissajous path.
        zoom = 0.775 + 0.225 * math.cos(phase)
        crop_h = min(still_h * zoom, still_w / aspect)
        crop_w = crop_h * aspect
        cx = still_w / 2 + (still_w - crop_w) / 2 * math.sin(phase)
        cy = still_h / 2 + (still_h - crop_h) / 2 * math.sin(2 * phase)
        x0, y0 = max(0, int(cx - crop_w / 2)), max(0, int(cy - crop_h / 2))
        crop = self._still[y0 : y0 + int(crop_h), x0 : x0 + int(crop_w)]
        return np.ascontiguousarray(cv2.resize(crop, (width, height), interpolation=cv2.INTER_AREA))

    def close(self) -> None:
        self._still = None
