"""How a pipeline file names a source."""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .backoff import BackoffPolicy
from .skipped_frames import FrameErrorPolicy


class BufferPolicy(str, Enum):
    """What the runtime does when frames arrive faster than the pipeline takes them."""

    LATEST = "latest"
    """Keep only the newest frames; older ones are dropped and counted (live cameras)."""
    BLOCK = "block"
    """Wait until there is room: nothing is dropped (files, folders, replays)."""


class ReconnectSpec(BaseModel):
    """Exponential backoff for live sources (rtsp, v4l2, csi, gst, realtime synthetic)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    initial_delay: float = Field(0.5, gt=0, description="Seconds to wait before the first reconnect attempt.")
    max_delay: float = Field(10.0, gt=0, description="The longest wait between two attempts, in seconds.")
    multiplier: float = Field(
        2.0, ge=1.0, description="Each wait is this many times the previous one, up to max_delay."
    )
    max_attempts: int | None = Field(
        None,
        ge=1,
        description="Give up (status source_failed) after this many attempts without a frame; null retries forever.",
    )
    jitter: float = Field(
        0.1,
        ge=0.0,
        le=1.0,
        description="Spread each wait by up to this fraction, so many cameras do not reconnect in lockstep.",
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
            "synthetic://?image=PATH&frames=N&size=WxH&fps=F&realtime=true, "
            "rtsp://[USER:PASS@]HOST[:PORT]/PATH or rtsps://... (query: transport=tcp|udp, open_timeout_ms, "
            "read_timeout_ms; TCP by default), v4l2:///dev/video0?width=W&height=H&fps=F or a bare camera index "
            "like 0, csi://SENSOR?width=W&height=H&fps=F&flip=0..7 (Jetson CSI camera), "
            "gst://PIPELINE ending in appsink. csi:// and gst:// need OpenCV built with GStreamer. "
            "Relative paths are relative to the pipeline file."
        )
    )
    name: str | None = Field(
        None, description="Name in results; defaults to the file, folder, device or stream path name."
    )
    loop: bool = Field(False, description="Start again at the end (files and folders).")
    max_frames: int | None = Field(None, ge=1, description="Stop after this many frames.")
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

    def buffer_policy(self, is_live: bool) -> BufferPolicy:
        """The buffer policy in force for a source that is (or is not) live."""
        if self.buffer is not None:
            return self.buffer
        return BufferPolicy.LATEST if is_live else BufferPolicy.BLOCK
