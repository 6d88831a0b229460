"""The options each URI scheme takes, as pydantic models: written in the URI query
(`synthetic://?frames=50&size=320x240`) or as a mapping next to it (`options: {frames: 50}`).

A query is text, so spec.py reads it with `model_validate_strings`; the mapping form is as strict as
the rest of the pipeline file (a number is a YAML number, not a quoted string).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from .rtsp import DEFAULT_OPEN_TIMEOUT_MS, DEFAULT_READ_TIMEOUT_MS

MAX_FRAMES = 1_000_000_000_000
"""Largest max_frames or synthetic frames: more than a camera delivers in a thousand years at 30 FPS."""
MAX_SIDE = 16384
"""Widest or tallest frame a source may be asked for (size, width, height)."""
MAX_FPS = 10_000.0
MAX_TIMEOUT_MS = 600_000
"""Longest RTSP open or read timeout: 10 minutes."""
MAX_IMAGE_PATH_LENGTH = 4096

_SIZE = re.compile(r"([0-9]+)[xX]([0-9]+)")


class SourceOptions(BaseModel):
    """What every scheme's options share: unknown keys are refused, and options never change after loading."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class SyntheticOptions(SourceOptions):
    """synthetic://: a virtual camera panning and zooming across a still image (or a colour gradient)."""

    image: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_IMAGE_PATH_LENGTH,
        description="The still image to pan across, relative to the pipeline file; null renders a moving gradient.",
    )
    frames: int = Field(
        300, ge=1, le=MAX_FRAMES, strict=True, description="Frames before the source ends (or loops), 1..10^12."
    )
    size: str = Field(
        "640x480",
        description=f"Frame size as WIDTHxHEIGHT, e.g. 320x240; each side 1..{MAX_SIDE}.",
        json_schema_extra={"pattern": f"^{_SIZE.pattern}$"},
    )
    fps: float = Field(
        30.0,
        gt=0,
        le=MAX_FPS,
        strict=True,
        description=f"Frames per second it stamps (and paces, with realtime); 0 < fps <= {MAX_FPS:g}.",
    )
    realtime: bool = Field(
        False, description="Deliver frames at fps like a live camera (drops when behind) instead of as fast as read."
    )

    @field_validator("size")
    @classmethod
    def _width_x_height(cls, size: str) -> str:
        match = _SIZE.fullmatch(size)
        if match is None:
            raise PydanticCustomError("size_format", "expected WIDTHxHEIGHT, two whole numbers such as 640x480")
        width, height = int(match[1]), int(match[2])
        if not (1 <= width <= MAX_SIDE and 1 <= height <= MAX_SIDE):
            raise PydanticCustomError("size_range", f"expected each side at least 1 and at most {MAX_SIDE}")
        return f"{width}x{height}"

    @property
    def frame_size(self) -> tuple[int, int]:
        """(width, height) of `size`."""
        width, height = self.size.split("x")
        return int(width), int(height)


def _side(default: int | None, what: str) -> Any:
    return Field(default, ge=1, le=MAX_SIDE, strict=True, description=f"{what}, 1..{MAX_SIDE}.")


def _fps(default: float | None, what: str) -> Any:
    return Field(default, gt=0, le=MAX_FPS, strict=True, description=f"{what}; 0 < fps <= {MAX_FPS:g}.")


class V4L2Options(SourceOptions):
    """v4l2:// (or a bare camera index): a USB or built-in camera. Each is a request: the driver picks
    the nearest mode it has."""

    width: int | None = _side(None, "Frame width to ask the camera for; null keeps the driver's")
    height: int | None = _side(None, "Frame height to ask the camera for; null keeps the driver's")
    fps: float | None = _fps(None, "Frame rate to ask the camera for; null keeps the driver's")


class CsiOptions(SourceOptions):
    """csi://SENSOR: a Jetson CSI camera through nvarguscamerasrc (needs OpenCV with GStreamer)."""

    width: int = _side(1920, "Sensor mode width")
    height: int = _side(1080, "Sensor mode height")
    fps: float = _fps(30.0, "Sensor mode frame rate")
    flip: int = Field(
        0, ge=0, le=7, strict=True, description="nvvidconv flip-method, 0..7 (0 none, 2 rotate 180, 4 mirror)."
    )


class RtspOptions(SourceOptions):
    """rtsp:// and rtsps://: a network camera or server. In the URI query only these keys are the SDK's;
    every other query parameter (e.g. channel=1) goes to the camera unchanged."""

    transport: Literal["tcp", "udp"] = Field(
        "tcp", description="tcp (no lost packets, passes NAT and firewalls) or udp (RTP over UDP)."
    )
    open_timeout_ms: int = Field(
        DEFAULT_OPEN_TIMEOUT_MS,
        ge=1,
        le=MAX_TIMEOUT_MS,
        strict=True,
        description=f"How long opening may take, in milliseconds; 1..{MAX_TIMEOUT_MS} (10 minutes).",
    )
    read_timeout_ms: int = Field(
        DEFAULT_READ_TIMEOUT_MS,
        ge=1,
        le=MAX_TIMEOUT_MS,
        strict=True,
        description=f"How long one read may block, in milliseconds; 1..{MAX_TIMEOUT_MS} (10 minutes).",
    )

    @field_validator("transport", mode="before")
    @classmethod
    def _any_case(cls, transport: Any) -> Any:
        return transport.lower() if isinstance(transport, str) else transport
