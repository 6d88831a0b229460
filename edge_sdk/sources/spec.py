"""How a pipeline file names a source."""

from __future__ import annotations

from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .backoff import BackoffPolicy
from .options import MAX_FRAMES
from .options_input import validated_options
from .schemes import SCHEMES, AnySourceOptions
from .skipped_frames import FrameErrorPolicy

MAX_URI_LENGTH = 8192
"""Longest source URI (a gst:// pipeline can be long)."""
MAX_NAME_LENGTH = 200
"""Longest source name (it goes into results, stage names and MQTT topics)."""
_WITHOUT_OPTIONS = ", ".join(f"{name}://" for scheme in SCHEMES if scheme.options is None for name in scheme.names)


class BufferPolicy(str, Enum):
    """What the runtime does when frames arrive faster than the pipeline takes them."""

    LATEST = "latest"
    """Keep only the newest frames; older ones are dropped and counted (live cameras)."""
    BLOCK = "block"
    """Wait until there is room: nothing is dropped (files, folders, replays)."""


class ReconnectSpec(BaseModel):
    """Exponential backoff for live sources (rtsp, v4l2, csi, gst, realtime synthetic)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    initial_delay: float = Field(
        0.5,
        gt=0,
        le=3600,
        strict=True,
        description="Seconds to wait before the first reconnect attempt; 0 < initial_delay <= 3600.",
    )
    max_delay: float = Field(
        10.0,
        gt=0,
        le=86_400,
        strict=True,
        description="The longest wait between two attempts, in seconds; 0 < max_delay <= 86400 (a day).",
    )
    multiplier: float = Field(
        2.0,
        ge=1.0,
        le=100.0,
        strict=True,
        description="Each wait is this many times the previous one, up to max_delay; 1..100.",
    )
    max_attempts: int | None = Field(
        None,
        ge=1,
        le=1_000_000_000,
        strict=True,
        description="Give up (status source_failed) after this many attempts without a frame, 1..10^9; null "
        "retries forever.",
    )
    jitter: float = Field(
        0.1,
        ge=0.0,
        le=1.0,
        strict=True,
        description="Spread each wait by up to this fraction (0..1), so many cameras do not reconnect in lockstep.",
    )

    @model_validator(mode="after")
    def _max_delay_not_below_initial(self) -> ReconnectSpec:
        if self.max_delay < self.initial_delay:
            raise ValueError(f"expected max_delay >= initial_delay ({self.initial_delay}), got {self.max_delay}")
        return self

    def policy(self) -> BackoffPolicy:
        return BackoffPolicy(self.initial_delay, self.max_delay, self.multiplier, self.max_attempts, self.jitter)


class SourceSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    uri: str = Field(
        description=(
            "Where frames come from: a video path or file://PATH, images://FOLDER, "
            "synthetic://?image=PATH&frames=N&size=WxH&fps=F&realtime=true (a virtual camera over a still), "
            "rtsp://[USER:PASS@]HOST[:PORT]/PATH or rtsps://... (transport=tcp|udp, open_timeout_ms, "
            "read_timeout_ms; TCP by default; other query parameters go to the camera), "
            "v4l2:///dev/video0?width=W&height=H&fps=F or a bare camera index like '0' (quoted in YAML), "
            "csi://SENSOR?width=W&height=H&fps=F&flip=0..7 (Jetson CSI camera), gst://PIPELINE ending in appsink. "
            "csi:// and gst:// need OpenCV built with GStreamer. Relative paths are relative to the pipeline file. "
            "A scheme's options (see options) may be written in the query, as here, or under options:."
        ),
        min_length=1,
        max_length=MAX_URI_LENGTH,
    )
    options: AnySourceOptions | None = Field(
        None,
        description=(
            "The options of the uri's scheme as a mapping, e.g. {frames: 50, size: 320x240} for synthetic://: "
            "the same keys as its query, checked as strictly as the rest of the file. An option may be in the "
            f"query or here, not both. {_WITHOUT_OPTIONS} take none."
        ),
    )
    name: str | None = Field(
        None,
        max_length=MAX_NAME_LENGTH,
        description=f"Name in results (at most {MAX_NAME_LENGTH} characters); defaults to the file, folder, device "
        "or stream path name.",
    )
    loop: bool = Field(False, description="Start again at the end (files and folders).")
    max_frames: int | None = Field(
        None,
        ge=1,
        le=MAX_FRAMES,
        strict=True,
        description="Stop after this many frames, 1..10^12 (a thousand years at 30 FPS); null = no limit.",
    )
    reconnect: ReconnectSpec = Field(
        default_factory=ReconnectSpec,
        description=(
            "How a live source reconnects after a failed open or a lost stream: exponential backoff from "
            "initial_delay up to max_delay. Ignored for files and folders."
        ),
    )
    buffer: BufferPolicy | None = Field(
        None,
        description=(
            "When the pipeline falls behind: 'latest' drops the oldest frames (counted), 'block' makes the "
            "source wait. null means latest for live sources and block for files, folders and non-realtime "
            "synthetic sources."
        ),
    )
    on_error: FrameErrorPolicy = Field(
        FrameErrorPolicy.SKIP,
        description=(
            "A corrupt image in a folder or an unreadable stretch of a video file: 'skip' passes over it, counts "
            "it (frames_skipped in the run summary) and reports it (status frames_skipped); 'stop' ends the "
            "source with an error naming the frame. A video whose tail cannot be read ends there either way "
            "(with skip, the unread frames are counted as skipped). Live sources reconnect instead."
        ),
    )

    @model_validator(mode="before")
    @classmethod
    def _options_of_its_scheme(cls, data: Any) -> Any:
        """The query's options and those under `options:` become the scheme's options model, checked
        when the file loads (a 60000x60000 synthetic frame would exhaust memory)."""
        if not isinstance(data, dict):
            return data
        uri = data.get("uri")
        if not isinstance(uri, str) or len(uri) > MAX_URI_LENGTH:
            # the uri field reports what is wrong with it; options mean nothing without a scheme
            return {key: value for key, value in data.items() if key != "options"}
        return {**data, "options": validated_options(uri, data.get("options"))}

    def buffer_policy(self, is_live: bool) -> BufferPolicy:
        """The buffer policy in force for a source that is (or is not) live."""
        if self.buffer is not None:
            return self.buffer
        return BufferPolicy.LATEST if is_live else BufferPolicy.BLOCK
