"""The pipeline file: model, preprocessing, sources, post-processing, sinks."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from edge_sdk.core.precision import Precision
from edge_sdk.core.preprocess import PreprocessSpec
from edge_sdk.core.yaml_model import load_yaml_model
from edge_sdk.pipeline.cascade import CascadeSpec
from edge_sdk.pipeline.extensions import pipeline_extension
from edge_sdk.postprocess import PostprocessSpec
from edge_sdk.serving.breaker import BreakerSettings
from edge_sdk.sinks import SinkSpec
from edge_sdk.sources.spec import SourceSpec


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


class FallbackSpec(ModelSpec):
    """A lighter model (the INT8 or a smaller variant) frames go to while the circuit breaker is open;
    built, cached and gated like the primary, and read by the same post-processor."""

    preprocess: PreprocessSpec | None = Field(
        None, description="What the fallback expects its input to look like; null = the primary's preprocess."
    )
    breaker: BreakerSettings = Field(
        default_factory=BreakerSettings,
        description="When frames go to the fallback and when they come back (docs/pipelines.md, fallback).",
    )


class PrometheusSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    port: int = Field(9108, ge=1, le=65535, strict=True, description="Port of the /metrics endpoint (1..65535).")
    address: str = Field("127.0.0.1", description="Address to listen on; 0.0.0.0 exposes it to the network.")


MAX_RING_SLOTS = 1024
"""Slots per source: beyond this a ring is memory, not a buffer (1024 frames is half a minute at 30 FPS)."""
MAX_FRAME_SIDE = 16384
"""Widest or tallest frame slot, in pixels (16K video is 15360 wide)."""
MAX_BATCH_SIZE = 1024
"""Frames per inference call; larger batches stop paying off long before this."""
MAX_INFERENCE_WORKERS = 32
"""Inference processes; each holds its own engine, so memory grows with every one."""
MAX_INFERENCE_THREADS = 256

FrameSide = Annotated[int, Field(ge=16, le=MAX_FRAME_SIDE, strict=True)]


class RuntimeSpec(BaseModel):
    """How stages run: processes over shared memory (default) or one in-process loop.

    Every number has bounds a real pipeline never reaches by accident; they are checked when the
    file loads, before any build or process start.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["processes", "inline"] = Field(
        "processes", description="processes: capture, inference and output overlap; inline: one loop, one process."
    )
    ring_slots: int = Field(
        8,
        ge=3,
        le=MAX_RING_SLOTS,
        strict=True,
        description=f"Frame slots per source in shared memory (bounds memory), 3..{MAX_RING_SLOTS}.",
    )
    max_frame_size: tuple[FrameSide, FrameSide] = Field(
        (1920, 1080),
        description=f"[width, height] of the largest frame a live source may deliver; each side 16..{MAX_FRAME_SIDE}.",
    )
    batch_size: int = Field(
        1,
        ge=1,
        le=MAX_BATCH_SIZE,
        strict=True,
        description=f"Frames (across sources) per inference call, 1..{MAX_BATCH_SIZE}.",
    )
    batch_timeout_ms: float = Field(
        5.0, ge=0, le=10_000, strict=True, description="How long inference waits to fill a batch, 0..10000 ms."
    )
    latency_slo_ms: float | None = Field(
        None,
        gt=0,
        le=60_000,
        description="p99 latency target in ms (a live source: from capture to result; a file: from the engine "
        "call to the result). Set, each inference worker picks batch size (up to batch_size) and queue delay "
        "from measured batch latency and arrival rate, instead of batch_timeout_ms, and drops frames that "
        "cannot meet it (counted as dropped). A target no batch can meet is refused at start with the measured "
        "best latency. In the inline runtime only that check applies (it runs one frame at a time).",
    )
    inference_workers: int | None = Field(
        None,
        ge=1,
        le=MAX_INFERENCE_WORKERS,
        strict=True,
        description="Inference processes. null = automatic: on CPU-only profiles one per core (up to 4), each "
        "with 1 thread, which gives the most frames/s; on accelerators 1. Set 1 for the lowest latency on a CPU. "
        f"1..{MAX_INFERENCE_WORKERS}.",
    )
    inference_threads: int | None = Field(
        None,
        ge=1,
        le=MAX_INFERENCE_THREADS,
        strict=True,
        description="Threads per inference call in each worker; null = automatic (see inference_workers). "
        f"1..{MAX_INFERENCE_THREADS}.",
    )
    max_restarts: int = Field(
        3, ge=0, le=100, strict=True, description="Restarts a crashed stage may have within restart_window_s, 0..100."
    )
    restart_window_s: float = Field(
        60.0, gt=0, le=86_400, strict=True, description="Window for max_restarts, in seconds (at most a day)."
    )
    stats_interval_s: float = Field(
        1.0, ge=0.1, le=3600, strict=True, description="How often stages report counters, 0.1..3600 s."
    )
    stop_timeout_s: float = Field(
        5.0,
        ge=1.0,
        le=600,
        description="Ctrl-C or SIGTERM ends the run within this many seconds: stages drain what they hold, "
        "and whatever has not finished by then is killed. 1..600 s.",
    )
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
    fallback: FallbackSpec | None = Field(
        None,
        description="A lighter model frames go to while the primary is too slow or failing (a circuit "
        "breaker); null = none.",
    )
    runtime: RuntimeSpec = Field(default_factory=RuntimeSpec, description="How the stages run.")
    offload: Any = Field(
        None,
        description="Split inference between this box and cloud workers over MQTT (cloud_offload; docs/offload.md); "
        "null = everything here.",
        json_schema_extra={"type": ["object", "null"]},
    )
    _base_dir: Path = PrivateAttr(default_factory=Path)

    @model_validator(mode="before")
    @classmethod
    def _sdk_decode_reads_the_model(cls, data: Any) -> Any:
        """`postprocess: {type: ssd, decode: sdk}` decodes with the settings in the model's graph: the
        postprocess learns which file that is (a path, no I/O; `resolved` rebases it with the others)."""
        if not isinstance(data, dict):
            return data
        post, model = data.get("postprocess"), data.get("model")
        model_path = model.get("path") if isinstance(model, dict) else getattr(model, "path", None)
        if isinstance(post, dict):
            decode, decode_model = (
                (post.get("decode"), post.get("decode_model")) if post.get("type") == "ssd" else ("", 0)
            )
        else:
            decode, decode_model = getattr(post, "decode", None), getattr(post, "decode_model", 0)
        if decode != "sdk" or decode_model is not None or model_path is None:
            return data
        if isinstance(post, dict):
            return {**data, "postprocess": {**post, "decode_model": model_path}}
        assert isinstance(post, BaseModel)  # only a spec has a `decode` attribute
        return {**data, "postprocess": post.model_copy(update={"decode_model": Path(model_path)})}

    @model_validator(mode="before")
    @classmethod
    def _offload_by_its_extension(cls, data: Any) -> Any:
        """The `offload:` section belongs to cloud_offload (`pipeline/extensions.py`): it validates it,
        and its errors are reported at their place in the section."""
        if not isinstance(data, dict) or data.get("offload") is None or isinstance(data["offload"], BaseModel):
            return data
        extension = pipeline_extension("offload")
        try:
            return {**data, "offload": extension.validate(data["offload"])}
        except ValidationError as error:
            details = [
                InitErrorDetails(
                    type=PydanticCustomError("offload", detail["msg"]),
                    loc=("offload", *detail["loc"]),
                    input=detail["input"],
                )
                for detail in error.errors()
            ]
            raise ValidationError.from_exception_data(cls.__name__, details) from None

    @model_validator(mode="after")
    def _source_names_are_unique(self) -> PipelineConfig:
        """Results, rings, stage names and MQTT topics are keyed on the source name: two sources may not share one."""
        seen: dict[str, int] = {}
        for index, spec in enumerate(self.sources):
            name = source_display_name(spec)
            if name in seen:
                raise ValidationError.from_exception_data(
                    type(self).__name__,
                    [
                        InitErrorDetails(
                            type=PydanticCustomError(
                                "duplicate_source_name",
                                f"expected a name no other source has (sources.{seen[name]} is also {name!r}; "
                                "set name: on one of them)",
                            ),
                            loc=("sources", index, "name" if spec.name is not None else "uri"),
                            input=name,
                        )
                    ],
                )
            seen[name] = index
        return self

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


def source_display_name(spec: SourceSpec) -> str:
    """The name a source has in results: `spec.name`, else the one its class derives from the URI
    (file stem, folder name, device name, last RTSP path segment, csiN, gstreamer, synthetic).

    Computed from the URI alone (no I/O, no OpenCV), so a config can be checked before anything
    opens; tests/pipeline/test_config.py keeps it equal to `create_source(spec, ...).name`.
    """
    if spec.name is not None:
        return spec.name
    uri = spec.uri.strip()
    if uri.startswith("gst://"):
        return "gstreamer"
    if uri.isdigit():
        return f"video{int(uri)}"
    try:
        parts = urlsplit(uri)
    except ValueError:
        return uri
    scheme = parts.scheme if len(parts.scheme) > 1 else "file"
    location = uri if scheme == "file" and not parts.scheme else parts.netloc + parts.path
    if scheme == "file":
        return Path(os.path.normpath(location)).stem
    if scheme == "images":
        return Path(os.path.normpath(location)).name
    if scheme == "synthetic":
        return "synthetic"
    if scheme in ("rtsp", "rtsps"):
        segments = [segment for segment in parts.path.split("/") if segment]
        return segments[-1] if segments else (parts.hostname or "rtsp")
    if scheme == "v4l2":
        return f"video{int(location)}" if location.isdigit() else Path(location).name
    if scheme == "csi":
        return f"csi{location.strip('/') or '0'}"
    return uri  # an unknown scheme: create_source refuses it with its own message


def _rebase_paths(value: Any, rebase: Callable[[Path], Path]) -> Any:
    if isinstance(value, Path):
        return rebase(value)
    if isinstance(value, BaseModel):
        updates = {name: _rebase_paths(getattr(value, name), rebase) for name in type(value).model_fields}
        return value.model_copy(update=updates)
    if isinstance(value, list | tuple):
        return type(value)(_rebase_paths(item, rebase) for item in value)
    return value


def load_pipeline(path: str | os.PathLike[str]) -> PipelineConfig:
    """Load and validate a pipeline file; relative paths in it start from its folder."""
    path = Path(path)
    return load_yaml_model(path, PipelineConfig).resolved(path.resolve().parent)
