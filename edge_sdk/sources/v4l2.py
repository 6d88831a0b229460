"""Frames from a USB or built-in camera through OpenCV's Video4Linux2 backend."""

from __future__ import annotations

import stat
from pathlib import Path
from types import ModuleType
from typing import Any

from edge_sdk.core.errors import PermanentSourceError, SourceError
from edge_sdk.sources.live_capture import LiveCaptureSource


class V4L2Source(LiveCaptureSource):
    """A V4L2 camera named by device path (/dev/video0) or index (0 = /dev/video0).

    `width`, `height` and `fps` are requests: the driver picks the nearest mode it has.
    """

    def __init__(
        self,
        device: str | int,
        name: str | None = None,
        width: int | None = None,
        height: int | None = None,
        fps: float | None = None,
    ):
        self.device = device
        self.device_path = Path(f"/dev/video{device}") if isinstance(device, int) else Path(device)
        super().__init__(name or self.device_path.name, f"camera {self.device_path}")
        self.requested = {"width": width, "height": height, "fps": fps}

    def _open_capture(self, cv2: ModuleType) -> Any:
        if not self.device_path.exists():
            raise SourceError(f"camera device not found: {self.device_path} (is the camera plugged in?)")
        try:
            mode = self.device_path.stat().st_mode
        except OSError as error:
            raise SourceError(f"cannot inspect {self.description}: {error}") from None
        if not stat.S_ISCHR(mode):  # e.g. a video file given as a camera: no retry makes it one
            raise PermanentSourceError(f"{self.description} is not a camera device (not a character device)")
        capture = cv2.VideoCapture(str(self.device_path), cv2.CAP_V4L2)
        for key, prop in (
            ("width", cv2.CAP_PROP_FRAME_WIDTH),
            ("height", cv2.CAP_PROP_FRAME_HEIGHT),
            ("fps", cv2.CAP_PROP_FPS),
        ):
            value = self.requested[key]
            if value is not None and capture.isOpened():
                capture.set(prop, float(value))
        return capture

    def _open_failed_message(self) -> str:
        return f"OpenCV cannot open {self.description}: not a capture device, busy, or no permission (group 'video')"
