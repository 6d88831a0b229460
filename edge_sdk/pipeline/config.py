"""The pipeline file: model, preprocessing, sources, post-processing, sinks."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from edge_sdk.postprocess import PostprocessSpec
from edge_sdk.postprocess.cascade import CascadeSpec
from edge_sdk.precision import Precision
from edge_sdk.sinks import SinkSpec
from edge_sdk.sources.spec import SourceSpec
from edge_sdk.yaml_model import load_yaml_model

from .preprocess import PreprocessSpec


class CalibrationSpec(BaseModel):
    """Data and gate for an int8 engine; unset settings come from the device profile's `int8` block."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    data: Path = Field(description="A folder of images, a video, or an .npz; relative to the pipeline file.")
    method: Literal["minmax", "entropy", "percentile"] | None = Field(
        None, description="How activation ranges are calibrated; the profile's when null."
    )
    max_accuracy_drop: float | None = Field(
        None, ge=0.0, le=100.0, description="Points int8 may lose (top-1 or matched boxes); the profile's when null."
    )
    min_cosine: float | None = Field(
        None, ge=0.0, le=1.0, description="Lowest cosine similarity to FP32 per output; the profile's when null."
    )
    fallback: Literal["none", "mixed"] | None = Field(
        None, description="When the gate fails: none = fail; mixed = keep sensitive layers in float."
    )


class ModelSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    path: Path = Field(description="ONNX model; relative to the pipeline file.")
    input: str | None = Field(None, description="Input that receives frames; needed when the model has several.")
    precision: Precision | None = Field(None, description="Engine precision; the profile's default when null.")
    calibration: CalibrationSpec | None = Field(
        None, description="Calibration data and accuracy gate; required when the precision is int8."
    )


class PrometheusSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    port: int = Field(9108, ge=1, le=65535, description="Port of the /metrics endpoint.")
    address: str = Field("127.0.0.1", description="Address to listen on; 0.0.0.0 exposes it to the network.")


class RuntimeSpec(BaseModel):
    """How stages run: processes over shared memory (default) or one in-process loop."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["processes", "inline"] = Field(
        "processes", description="processes: capture, inference and output overlap; inline: one loop, one process."
    )
    ring_slots: int = Field(8, ge=3, description="Frame slots per source in shared memory (bounds memory).")
    max_frame_size: tuple[int, int] = Field(
        (1920, 1080), description="[width, height] of the largest frame a live source may deliver."
    )
    batch_size: int = Field(1, ge=1, description="Frames (across sources) per inference call.")
    batch_timeout_ms: float = Field(5.0, ge=0, description="How long inference waits to fill a batch.")
    inference_workers: int | None = Field(
        None,
        ge=1,
        description="Inference processes. null = automatic: on CPU-only profiles one per core (up to 4), each "
        "with 1 thread, which gives the most frames/s; on accelerators 1. Set 1 for the lowest latency on a CPU.",
    )
    inference_threads: int | None = Field(
        None, ge=1, description="Threads per inference call in each worker; null = automatic (see inference_workers)."
    )
    max_restarts: int = Field(3, ge=0, description="Restarts a crashed stage may have within restart_window_s.")
    restart_window_s: float = Field(60.0, gt=0, description="Window for max_restarts, in seconds.")
    stats_interval_s: float = Field(1.0, gt=0, description="How often stages report counters.")
    prometheus: PrometheusSpec | None = Field(None, description="Serve Prometheus metrics while running; null = off.")


class PipelineConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="Pipeline name, shown in logs and status.")
    profile: str | None = Field(None, description="Device profile; detected from the host when null.")
    model: ModelSpec = Field(description="The model and how to build its engine.")
    preprocess: PreprocessSpec = Field(
        default_factory=PreprocessSpec, description="What the model expects its input to look like."
    )
    sources: list[SourceSpec] = Field(min_length=1, description="Where frames come from.")
    postprocess: PostprocessSpec = Field(description="How raw model outputs become results, keyed on `type:`.")
    cascade: CascadeSpec | None = Field(
        None, description="A classifier run on crops of the detections (e.g. vehicle colour); null = none."
    )
    sinks: list[SinkSpec] = Field(default_factory=list, description="Where results go, each keyed on `type:`.")
    runtime: RuntimeSpec = Field(default_factory=RuntimeSpec, description="How the stages run.")
    _base_dir: Path = PrivateAttr(default_factory=Path)

    @property
    def base_dir(self) -> Path:
        """Folder that relative paths in the file start from (the file's own folder once loaded)."""
        return self._base_dir

    def resolved(self, base_dir: Path) -> PipelineConfig:
        """A copy whose relative paths (model, cascade, sink files, broker certificates, password
        files: every Path field) start from `base_dir`."""

        def rebase(path: Path) -> Path:
            path = path.expanduser()
            return path if path.is_absolute() else Path(os.path.normpath(base_dir / path))

        copy: PipelineConfig = _rebase_paths(self, rebase)
        copy._base_dir = base_dir
        return copy


def _rebase_paths(value: Any, rebase: Callable[[Path], Path]) -> Any:
    if isinstance(value, Path):
        return rebase(value)
    if isinstance(value, BaseModel):
        updates = {name: _rebase_paths(getattr(value, name), rebase) for name in type(value).model_fields}
        return value.model_copy(update=updates)
    if isinstance(value, list | tuple):
        return type(value)(_rebase_paths(item, rebase) for item in value)
    return value


def load_pipeline(path: Path) -> PipelineConfig:
    """Load and validate a pipeline file; relative paths in it start from its folder."""
    return load_yaml_model(path, PipelineConfig).resolved(path.resolve().parent)
