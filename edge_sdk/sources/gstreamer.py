"""Frames from a GStreamer pipeline through OpenCV, including Jetson CSI cameras (nvarguscamerasrc).

Only an OpenCV built with GStreamer can do this: JetPack's is; the opencv-python wheels from PyPI
are not. The check happens when the source is made, so a pipeline file fails before it starts.
"""

from __future__ import annotations

from fractions import Fraction
from types import ModuleType
from typing import Any

from edge_sdk.core.errors import PermanentSourceError, SourceConfigError
from edge_sdk.core.opencv import has_gstreamer, import_cv2
from edge_sdk.sources.live_capture import LiveCaptureSource

# A BGR appsink that keeps only the newest frame: a slow consumer must not queue up old ones.
APPSINK = "appsink drop=true max-buffers=1 sync=false"


def require_gstreamer(what: str) -> None:
    cv2 = import_cv2()
    if not has_gstreamer(cv2):
        raise PermanentSourceError(
            f"{what} needs OpenCV with GStreamer, and the OpenCV here ({cv2.__version__}) lacks it "
            "(the PyPI opencv-python wheels are built without it; on Jetson use the OpenCV JetPack ships, "
            "elsewhere build OpenCV with -DWITH_GSTREAMER=ON)"
        )


def nvargus_pipeline(
    sensor_id: int = 0, width: int = 1920, height: int = 1080, fps: float = 30.0, flip: int = 0
) -> str:
    """The GStreamer pipeline for a Jetson CSI camera: NVMM capture, hardware convert, BGR appsink."""
    if sensor_id < 0:
        raise SourceConfigError(f"csi source: expected a sensor id >= 0, got {sensor_id}")
    if width < 1 or height < 1 or fps <= 0:
        raise SourceConfigError(f"csi source: expected width, height >= 1 and fps > 0, got {width}x{height} at {fps}")
    if not 0 <= flip <= 7:
        raise SourceConfigError(f"csi source: expected flip between 0 and 7 (nvvidconv flip-method), got {flip}")
    rate = Fraction(fps).limit_denominator(1001)
    return (
        f"nvarguscamerasrc sensor-id={sensor_id} ! "
        f"video/x-raw(memory:NVMM), width=(int){width}, height=(int){height}, "
        f"framerate=(fraction){rate.numerator}/{rate.denominator}, format=(string)NV12 ! "
        f"nvvidconv flip-method={flip} ! video/x-raw, format=(string)BGRx ! "
        f"videoconvert ! video/x-raw, format=(string)BGR ! {APPSINK}"
    )


class GStreamerSource(LiveCaptureSource):
    """Any GStreamer pipeline whose last element is an appsink delivering BGR frames."""

    def __init__(self, pipeline: str, name: str | None = None, description: str | None = None):
        pipeline = pipeline.strip()
        last = pipeline.rsplit("!", 1)[-1].split()
        if not last or last[0] != "appsink":
            raise SourceConfigError(f"gst source: expected a pipeline ending in '! appsink ...', got '{pipeline}'")
        description = description or f"GStreamer pipeline '{pipeline}'"
        require_gstreamer(description)
        super().__init__(name or "gstreamer", description)
        self.pipeline = pipeline

    def _open_capture(self, cv2: ModuleType) -> Any:
        return cv2.VideoCapture(self.pipeline, cv2.CAP_GSTREAMER)
