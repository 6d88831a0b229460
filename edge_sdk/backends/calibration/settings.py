"""What an INT8 build is asked for: how to calibrate, how much accuracy may be lost, and on what task."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from edge_sdk.postprocess import PostprocessSpec

if TYPE_CHECKING:
    from .reader import CalibrationReader

CALIBRATION_FORMAT = 3
"""Bump when calibration or quantisation changes what the same data and settings produce."""


class Int8Settings(BaseModel):
    """How an INT8 engine is calibrated, quantised and checked; a profile's defaults, the CLI overrides."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    method: Literal["minmax", "entropy", "percentile"] = Field(
        "minmax",
        description="How activation ranges come from the calibration data: minmax (observed extremes), "
        "entropy (KL divergence of the histogram), percentile (clip the tails).",
    )
    percentile: float = Field(
        99.999, gt=90.0, le=100.0, description="Share of values kept by the percentile method, in percent."
    )
    per_channel: bool = Field(True, description="One weight scale per output channel (more accurate, little cost).")
    activation_type: Literal["uint8", "int8"] = Field(
        "uint8", description="Activation type: uint8 is the fast one on x86 CPUs; TensorRT needs int8."
    )
    weight_type: Literal["int8", "uint8"] = Field("int8", description="Weight type.")
    activation_symmetric: bool = Field(
        False, description="Symmetric activation ranges (zero point 0); TensorRT-style engines need them."
    )
    reduce_range: bool | Literal["auto"] = Field(
        "auto",
        description="7-bit weights: x86 CPUs without VNNI add u8 x s8 products in saturating 16-bit sums, "
        "which 8-bit weights can overflow. auto = on x86 without avx512_vnni/avx_vnni/amx_int8 only.",
    )
    max_samples: int = Field(200, ge=2, description="Samples read from the calibration data, at most.")
    holdout_every: int = Field(
        4, ge=2, description="Every k-th sample is held out to check accuracy; the rest calibrate."
    )
    max_accuracy_drop: float = Field(
        1.0,
        ge=0.0,
        le=100.0,
        description="Points (percent) the INT8 engine may lose: top-1 accuracy (or agreement when there "
        "are no labels) for classification, matched boxes for detection.",
    )
    min_cosine: float = Field(
        0.99, ge=0.0, le=1.0, description="Cosine similarity every output must keep with FP32 (not for detection)."
    )
    keep_float: Literal["auto", "none"] = Field(
        "auto",
        description="Layers kept in float before any gate: auto = for detectors, the post-processing after the "
        "last weighted layer (box decoding, NMS) and the stem, the first six convolutions (backends/int8/recipe.py); "
        "none = quantise every layer the backend can.",
    )
    fallback: Literal["none", "mixed"] = Field(
        "none",
        description="When the gate fails: none = fail the build with a report; mixed = keep the most "
        "sensitive layers in float until the gate passes.",
    )


class TaskSpec(BaseModel):
    """What the model's outputs mean, so accuracy is measured the way a user sees it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["classification", "detection", "generic"] = Field(
        "generic",
        description="classification: top-1 over one score output; detection: boxes decoded by `postprocess`; "
        "generic: per-output similarity only.",
    )
    output: str | None = Field(None, description="Classification scores output; null = the model's first output.")
    postprocess: PostprocessSpec | None = Field(None, description="Decodes detections (ssd or yolo) for detection.")
    iou_threshold: float = Field(0.5, gt=0.0, le=1.0, description="IoU at which two boxes of one label match.")
    score_margin: float = Field(
        0.05,
        ge=0.0,
        lt=1.0,
        description="A box still matches when the other engine scores it up to this much under the decoder's "
        "threshold, so a score merely crossing the threshold does not count as a lost box.",
    )

    @model_validator(mode="after")
    def _detection_needs_a_decoder(self) -> TaskSpec:
        if self.kind == "detection" and self.postprocess is None:
            raise ValueError("expected a postprocess spec (ssd or yolo) for task detection, got none")
        return self


@dataclass(frozen=True)
class Calibration:
    """Calibration data, settings and task: everything an INT8 build needs beyond the model."""

    reader: CalibrationReader
    settings: Int8Settings
    task: TaskSpec
    task_note: str = ""
    """Why this task, when the model's outputs implied it (for a status line; not part of the fingerprint)."""

    def fingerprint(self) -> str:
        """sha256 over the data (contents and reader settings), the INT8 settings and the task."""
        canonical = json.dumps(
            {
                "format": CALIBRATION_FORMAT,
                "data": self.reader.sha256(),
                "settings": self.settings.model_dump(mode="json"),
                "task": self.task.model_dump(mode="json"),
            },
            sort_keys=True,
        )
        return hashlib.sha256(canonical.encode()).hexdigest()
