"""How a pipeline file names a source."""

from __future__ import annotations

from enum import Enum
from urllib.parse import parse_qs, urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .backoff import BackoffPolicy
from .skipped_frames import FrameErrorPolicy

MAX_FRAMES = 1_000_000_000_000
"""Largest max_frames or synthetic frames=N: more than a camera delivers in a thousand years at 30 FPS."""
MAX_URI_LENGTH = 8192
"""Longest source URI (a gst:// pipeline can be long)."""
MAX_NAME_LENGTH = 200
"""Longest source name (it goes into results, stage names and MQTT topics)."""
MAX_SIDE = 16384
"""Widest or tallest frame a source may be asked for (size=WxH, width=, height=)."""
MAX_FPS = 10_000.0
MAX_TIMEOUT_MS = 600_000
"""Longest RTSP open or read timeout: 10 minutes."""

_QUERY_LIMITS: dict[str, dict[str, float]] = {
    "synthetic": {"frames": MAX_FRAMES, "size": MAX_SIDE, "fps": MAX_FPS},
    "v4l2": {"width": MAX_SIDE, "height": MAX_SIDE, "fps": MAX_FPS},
    "csi": {"width": MAX_SIDE, "height": MAX_SIDE, "fps": MAX_FPS},
    "rtsp": {"open_timeout_ms": MAX_TIMEOUT_MS, "read_timeout_ms": MAX_TIMEOUT_MS},
    "rtsps": {"open_timeout_ms": MAX_TIMEOUT_MS, "read_timeout_ms": MAX_TIMEOUT_MS},
}
"""Upper bounds of the SDK's own query numbers per scheme (an RTSP camera's own parameters are not ours).
Their format and lower bounds are checked by the source registry when the source is made."""


def _scheme_and_query(uri: str) -> tuple[str, dict[str, str]]:
    if uri.startswith("gst://") or uri.strip().isdigit():
        return "", {}
    try:
        parts = urlsplit(uri)
    except ValueError:
        return "", {}
    return parts.scheme.lower(), {key: values[-1] for key, values in parse_qs(parts.query).items()}


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
            "synthetic://?image=PATH&frames=N&size=WxH&fps=F&realtime=true, "
            "rtsp://[USER:PASS@]HOST[:PORT]/PATH or rtsps://... (query: transport=tcp|udp, open_timeout_ms, "
            "read_timeout_ms; TCP by default), v4l2:///dev/video0?width=W&height=H&fps=F or a bare camera index "
            "like 0, csi://SENSOR?width=W&height=H&fps=F&flip=0..7 (Jetson CSI camera), "
            "gst://PIPELINE ending in appsink. csi:// and gst:// need OpenCV built with GStreamer. "
            "Relative paths are relative to the pipeline file. Numbers in the query are bounded: "
            "size, width and height 1..16384 per side, fps 0 < F <= 10000, frames 1..10^12, "
            "open_timeout_ms and read_timeout_ms 1..600000 (10 minutes), flip 0..7."
        ),
        min_length=1,
        max_length=MAX_URI_LENGTH,
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

    @field_validator("uri")
    @classmethod
    def _query_numbers_within_limits(cls, uri: str) -> str:
        """Upper bounds of the numbers in the URI's query, checked when the file loads (a 60000x60000
        synthetic frame would exhaust memory); the registry checks their format and lower bounds."""
        scheme, query = _scheme_and_query(uri)
        for key, limit in _QUERY_LIMITS.get(scheme, {}).items():
            if key not in query:
                continue
            values = query[key].lower().split("x") if key == "size" else [query[key]]
            try:
                numbers = [float(value) for value in values]
            except ValueError:
                continue  # not a number: create_source says what it expected
            if any(number > limit or number != number for number in numbers):  # number != number: NaN
                if key == "size":
                    raise ValueError(f"size={query[key]} is too large: expected each side at most {limit:g}")
                raise ValueError(f"{key}={query[key]} is too large: expected at most {limit:g}")
        return uri

    def buffer_policy(self, is_live: bool) -> BufferPolicy:
        """The buffer policy in force for a source that is (or is not) live."""
        if self.buffer is not None:
            return self.buffer
        return BufferPolicy.LATEST if is_live else BufferPolicy.BLOCK
