"""A Calibration from what a user gives: a data path, a profile's settings with overrides, a pipeline's specs."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ValidationError

from edge_sdk.core.errors import ConfigError
from edge_sdk.core.model_file import ModelFile
from edge_sdk.core.tensor_meta import TensorMeta
from edge_sdk.postprocess.guess import UnrecognisedOutputs, guess_postprocess

from .data import open_calibration_data
from .settings import Calibration, Int8Settings, TaskSpec

if TYPE_CHECKING:
    from edge_sdk.core.preprocess import PreprocessSpec
    from edge_sdk.postprocess import AnyPostprocessSpec

TaskKind = Literal["classification", "detection", "generic"]


def int8_settings(base: Int8Settings | None, **overrides: Any) -> Int8Settings:
    """`base` (a profile's, else the defaults) with the overrides that are not None, validated."""
    values = (base or Int8Settings()).model_dump()
    values.update({key: value for key, value in overrides.items() if value is not None})
    try:
        return Int8Settings.model_validate(values)
    except ValidationError as exc:
        error = exc.errors()[0]
        key = ".".join(str(part) for part in error["loc"])
        raise ConfigError(f"int8 setting {key}: {error['msg']}, got {error.get('input')!r}") from None


def task_spec(
    kind: TaskKind | None,
    postprocess: AnyPostprocessSpec | None = None,
    has_labels: bool = False,
    outputs: Sequence[TensorMeta] | None = None,
) -> TaskSpec:
    """The task to measure accuracy on: `kind` if given, else what the pipeline's post-processing implies,
    else detection when the model's `outputs` look like a detector's (SSD detections, a YOLO head), else
    classification when the data has labels, else generic."""
    return implied_task(kind, postprocess, has_labels, outputs)[0]


def implied_task(
    kind: TaskKind | None,
    postprocess: AnyPostprocessSpec | None = None,
    has_labels: bool = False,
    outputs: Sequence[TensorMeta] | None = None,
) -> tuple[TaskSpec, str]:
    """`task_spec`, and why that task, in words for a status line ('' when the caller said so)."""
    if kind is None and postprocess is None and outputs is not None:
        detector = detector_postprocess(outputs)
        if detector is not None:
            spec, summary = detector
            why = (
                f"accuracy judged as detection (matched boxes), because the {summary}; "
                "--pipeline or --task say otherwise"
            )
            return TaskSpec(kind="detection", postprocess=spec), why
    return _task_spec(kind, postprocess, has_labels), ""


def detector_postprocess(outputs: Sequence[TensorMeta]) -> tuple[AnyPostprocessSpec, str] | None:
    """The post-processor of a model whose outputs are a detector's (SSD detections, a YOLO head whose
    anchor count is a YOLO grid's), and what they look like; None for anything else (a classifier,
    features, a transformer's [1, 197, 768], which only has a YOLO head's rank)."""
    try:
        guess = guess_postprocess(outputs)
    except UnrecognisedOutputs:
        return None
    return (guess.spec, guess.summary) if guess.spec.type in ("ssd", "yolo") and guess.exact else None


def _task_spec(kind: TaskKind | None, postprocess: AnyPostprocessSpec | None, has_labels: bool) -> TaskSpec:
    implied: TaskKind = "generic"
    if postprocess is not None:
        implied = {"classification": "classification", "ssd": "detection", "yolo": "detection"}.get(
            postprocess.type, "generic"
        )  # type: ignore[assignment]
    elif has_labels:
        implied = "classification"
    kind = kind or implied
    if kind == "detection":
        if postprocess is None or postprocess.type not in ("ssd", "yolo"):
            got = postprocess.type if postprocess is not None else "none"
            raise ConfigError(
                f"task detection: expected a pipeline with an ssd or yolo postprocess (--pipeline), got {got}"
            )
        return TaskSpec(kind="detection", postprocess=postprocess)
    if kind == "classification":
        output = postprocess.output if postprocess is not None and postprocess.type == "classification" else None
        return TaskSpec(kind="classification", output=output)
    return TaskSpec(kind="generic")


def make_calibration(
    data: Path,
    model: ModelFile,
    settings: Int8Settings,
    task: TaskKind | None = None,
    *,
    preprocess: PreprocessSpec | None = None,
    postprocess: AnyPostprocessSpec | None = None,
    input_name: str | None = None,
) -> Calibration:
    """Open and check the calibration data against `model`, and pair it with the settings and the task."""
    reader = open_calibration_data(data, model, preprocess, input_name, limit=settings.max_samples)
    spec, why = implied_task(task, postprocess, reader.labels is not None, model.outputs)
    return Calibration(reader, settings, spec, why)
