"""What a device publishes below `edge/<d>/telemetry/` for operators to watch (the dashboard reads these).

| message | topic | QoS, retained | written by |
|---|---|---|---|
| `PipelineStats` (JSON) | `edge/<d>/telemetry/stats/<pipeline>` | 0, no; at most once per `stats_interval_s` | the agent |
| status event (JSON: device, pipeline, kind, subject, message, timestamp, data) | `edge/<d>/telemetry/pipelines/<pipeline>` | 1, no | the agent |
| preview thumbnail (JPEG bytes, at most `MAX_PREVIEW_BYTES`) | `edge/<d>/telemetry/preview/<pipeline>/<source>` | 0, no; opt-in per agent sink | the agent |

Live data goes at QoS 0 and is not spooled: a stale frame rate or thumbnail is worth nothing after an
outage. Decoding is as strict as the protocol's (`decode_message`).
"""

from __future__ import annotations

import math
from typing import Final

from pydantic import BaseModel, ConfigDict, Field, StrictInt

from .protocol import DeviceId, Name, decode_message, encode_message

STATS: Final = "stats"
PIPELINES: Final = "pipelines"
PREVIEW: Final = "preview"
MAX_STATS_BYTES: Final = 4 * 1024
MAX_STATUS_BYTES: Final = 16 * 1024
MAX_PREVIEW_BYTES: Final = 64 * 1024
"""A thumbnail larger than this is not published (the agent sink lowers the JPEG quality to fit)."""


class PipelineStats(BaseModel):
    """A running pipeline's live figures, from its runtime snapshot."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    device: DeviceId = Field(description="Device id.")
    pipeline: Name = Field(description="Pipeline name.")
    at: float = Field(ge=0, description="When the snapshot was taken (seconds since the epoch, the device's clock).")
    fps: float = Field(ge=0, le=1e6, description="Results per second over the last report interval.")
    latency_p50_ms: float | None = Field(
        None, ge=0, description="Capture-to-result latency, median (null: no result yet)."
    )
    latency_p99_ms: float | None = Field(None, ge=0, description="Capture-to-result latency, 99th percentile.")
    frames: StrictInt = Field(ge=0, description="Results since the pipeline started.")
    dropped: StrictInt = Field(ge=0, description="Frames the pipeline dropped since it started (all its rings).")


def stats_message(
    device: str, pipeline: str, at: float, fps: float, p50: float, p99: float, frames: int, dropped: int
) -> bytes:
    """The encoded PipelineStats; a NaN latency (no result yet) becomes null."""
    return encode_message(
        PipelineStats(
            device=device,
            pipeline=pipeline,
            at=at,
            fps=max(0.0, fps),
            latency_p50_ms=None if math.isnan(p50) else p50,
            latency_p99_ms=None if math.isnan(p99) else p99,
            frames=frames,
            dropped=dropped,
        )
    )


def decode_stats(payload: bytes) -> PipelineStats:
    return decode_message(payload, PipelineStats, MAX_STATS_BYTES)


class PipelineEvent(BaseModel):
    """A pipeline status event as the agent publishes it (the event's own data fields come alongside and
    are not read here)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    device: DeviceId = Field(description="Device id.")
    pipeline: Name = Field(description="Pipeline name.")
    kind: str = Field(max_length=64, description="The event kind (edge_sdk.core.status.StatusKind's values).")
    subject: str = Field("", max_length=256, description="What the event is about: a source, stage or sink.")
    message: str = Field("", max_length=4096, description="What happened, for people.")
    timestamp: float = Field(ge=0, description="When (seconds since the epoch, the device's clock).")


def decode_event(payload: bytes) -> PipelineEvent:
    return decode_message(payload, PipelineEvent, MAX_STATUS_BYTES)
