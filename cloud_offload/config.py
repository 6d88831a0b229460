"""The pipeline file's `offload:` section: which modes may run, how frames and tensors travel, the
deadline, escalation, the broker, and the decision's hysteresis (docs/offload.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .protocol import DEFAULT_GROUP

Mode = Literal["edge", "cloud", "split", "escalate"]
DEFAULT_MODES: tuple[Mode, ...] = ("edge", "cloud", "split")


class ImageSettings(BaseModel):
    """How `cloud` mode sends a frame: as it is or downscaled, then encoded."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["jpeg", "webp"] = Field("jpeg", description="Encoder (OpenCV's libjpeg-turbo or libwebp).")
    quality: int | Literal["auto"] = Field(
        "auto",
        description="A fixed quality (1-100), or auto: the highest of min..max whose frame the link carries "
        "within one frame interval.",
    )
    max_side: int | Literal["frame", "model"] = Field(
        "frame",
        description="The frame's longer side as sent: frame keeps the camera's size, model shrinks it to the model "
        "input's longer side (fewer bytes, but the demo detector then loses boxes to JPEG: docs/offload.md), or pixels.",
    )
    min_quality: int = Field(75, ge=1, le=100, description="The lowest quality auto goes down to.")
    max_quality: int = Field(90, ge=1, le=100, description="The quality auto uses on a fast link.")

    @model_validator(mode="after")
    def _ordered(self) -> ImageSettings:
        if self.min_quality > self.max_quality:
            raise ValueError(f"expected min_quality <= max_quality, got {self.min_quality} > {self.max_quality}")
        if isinstance(self.quality, int) and not 1 <= self.quality <= 100:
            raise ValueError(f"expected a quality from 1 to 100 or auto, got {self.quality}")
        return self


class TensorSettings(BaseModel):
    """How `split` mode sends the cut's tensors (cloud_offload/tensor_codec.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    precision: Literal["fp32", "fp16", "int8"] = Field("fp16", description="Float tensors cross as this.")
    compression: Literal["zstd", "none"] = Field("zstd", description="The body's byte compressor.")


class EscalateSettings(BaseModel):
    """`escalate` mode: the edge result goes out at once; unsure frames also go to a bigger cloud model,
    whose result follows as an update of the same frame."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pipeline: Path = Field(
        description="The cloud model's pipeline file (its model, preprocessing and post-processing; the worker "
        "serves the same file)."
    )
    threshold: float = Field(
        0.6, gt=0, le=1, description="A frame is unsure when a detection or its top class scores below this."
    )
    empty: bool = Field(False, description="Also escalate frames with no detection at all.")


class HysteresisSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    enter: float = Field(
        0.8, gt=0, lt=1, description="Switch to a mode expected below this share of the current mode's latency."
    )
    leave: float = Field(
        0.95,
        gt=0,
        le=1,
        description="Leave a remote mode for the edge once it is expected above this share of the edge's latency.",
    )
    dwell_s: float = Field(1.0, ge=0, description="Least time in a mode before the next switch (faults excepted).")

    @model_validator(mode="after")
    def _band(self) -> HysteresisSettings:
        if self.enter >= self.leave:
            raise ValueError(f"expected enter < leave (a band), got {self.enter} >= {self.leave}")
        return self


class OffloadSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    broker: Path = Field(
        description="Broker settings file (as the fleet's agent.yaml: host, port, TLS with the device's certificate)."
    )
    device: str | None = Field(
        None,
        description="This device's identity, its topics' prefix (edge/<device>/offload/...); the broker file's "
        "user name or client id when null. With the fleet's broker it must be the certificate's common name.",
    )
    modes: list[Mode] = Field(
        default_factory=lambda: list(DEFAULT_MODES),
        min_length=1,
        description="Modes the decision may pick; edge is always the fallback.",
    )
    cuts: Literal["auto"] | list[str] = Field(
        "auto", description="Tensors split mode may cut at, or auto: every cut that sends less than the ones before."
    )
    deadline_ms: float = Field(
        500.0, gt=0, description="How long a frame sent away may take before the edge computes it itself."
    )
    image: ImageSettings = Field(default_factory=ImageSettings)
    tensors: TensorSettings = Field(default_factory=TensorSettings)
    escalate: EscalateSettings | None = Field(None, description="Required when modes holds escalate.")
    group: str = Field(DEFAULT_GROUP, description="The workers' shared-subscription group.")
    max_in_flight: int = Field(
        8, ge=1, description="Frames away at once, escalations included; further frames are inferred here."
    )
    misses_to_back_off: int = Field(
        3, ge=1, description="Deadlines missed in a row before remote modes rest (back_off_s) and frames stay here."
    )
    back_off_s: float = Field(2.0, gt=0, description="How long remote modes rest after those misses.")
    hysteresis: HysteresisSettings = Field(default_factory=HysteresisSettings)
    throughput: bool = Field(
        True,
        description="When a live source brings frames faster than the edge computes them, send the share it cannot "
        "keep pace with to the fastest remote mode (slower per frame than the edge, but such a frame would wait or be "
        "dropped); false keeps every frame the decision gives the edge here.",
    )
    fixed: str | None = Field(
        None,
        description="Always this mode (edge, cloud or split@<tensor> as `offload plan` names it) instead of "
        "deciding: for benchmarks and debugging. Frames still fall back to the edge as in any mode.",
    )

    @model_validator(mode="after")
    def _escalation_named(self) -> OffloadSettings:
        if "escalate" in self.modes and self.escalate is None:
            raise ValueError("expected an escalate: section (pipeline, threshold) with mode escalate, got none")
        return self
