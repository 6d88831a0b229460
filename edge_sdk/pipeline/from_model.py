"""A pipeline made from a model file alone (`edge-sdk detect`): its input layout, size, dtype and
channel order and its post-processor read from the model where it says them, conventions where it
does not, and said in one line; written as a pipeline file a user can edit (`--save-pipeline`).

What is read: the input's rank-4 shape (NCHW when axis 1 holds 3 channels, NHWC when axis 3 does),
its fixed height and width, its dtype (uint8 frames go in as they are; float32 is scaled by 1/255),
an Ultralytics export's metadata (`names`: the class names, `imgsz`: the size of a dynamic input),
and the outputs (postprocess/guess.py). What is assumed, and said: RGB, a letterbox for YOLO heads
and a stretch otherwise, 640x640 for a YOLO head and 224x224 for a classifier whose float input has
no fixed size.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from edge_sdk.core.errors import ConfigError, ModelError
from edge_sdk.core.model_file import ModelFile, read_model_bytes
from edge_sdk.core.preprocess import PreprocessSpec
from edge_sdk.core.tensor_meta import Dim, TensorMeta, select_input
from edge_sdk.graph.ssd_head import find_ssd_head
from edge_sdk.postprocess import AnyPostprocessSpec
from edge_sdk.postprocess.guess import OutputGuess, guess_postprocess
from edge_sdk.sources.uri import split_source_uri

from .config import PipelineConfig, load_pipeline

DEFAULT_SIZES = {"yolov8": (640, 640), "yolov5": (640, 640), "classifier": (224, 224)}
"""[width, height] for a float input without a fixed size, by model family (their usual export sizes)."""
FLOAT_SCALE = 1 / 255


@dataclass(frozen=True)
class ModelGuess:
    """How a pipeline feeds this model and reads its outputs, and the line that says so."""

    model: Path
    input: TensorMeta
    preprocess: PreprocessSpec
    outputs: OutputGuess
    summary: str

    @property
    def postprocess(self) -> AnyPostprocessSpec:
        return self.outputs.spec


def guess_model(path: str | os.PathLike[str], labels: Sequence[str] | None = None) -> ModelGuess:
    """Read `path` and guess its preprocessing and post-processor; `labels` (class names) override
    the model's own. Raises ModelError (UnrecognisedOutputs for outputs it cannot read)."""
    path = Path(path)
    data = read_model_bytes(path)
    model, proto = ModelFile.parse_with_proto(path, data)  # the graph is read once
    metadata = {prop.key: prop.value for prop in proto.metadata_props}
    names = list(labels) if labels else _metadata_labels(metadata)
    model_input = select_input(model.inputs, None)
    layout = _layout(model_input)
    fixed = _fixed_size(model_input, layout)
    outputs = guess_postprocess(
        model.outputs, input_size=fixed or _metadata_size(metadata), labels=names, produced_by=_producers(proto)
    )
    if labels and outputs.family != "ssd" and not getattr(outputs.spec, "labels", None):
        # an SSD's class ids are whatever its training said; a head's or classifier's count is its shape
        raise ConfigError(
            f"{len(labels)} class names given, but the model's outputs look like {outputs.summary.removeprefix('outputs look like ')}: "
            "give one name per class"
        )
    known_size: tuple[tuple[int, int], str] | None = None
    if (imgsz := _metadata_size(metadata)) is not None:
        known_size = imgsz, "the model's imgsz metadata"
    elif outputs.family == "ssd" and (ssd_size := _ssd_resize(proto)) is not None:
        known_size = ssd_size, "the size the SSD graph resizes to"
    preprocess, notes = _preprocess(model_input, layout, fixed, outputs.family, known_size)
    named = getattr(outputs.spec, "labels", None)
    if named:
        names_note = "class names given" if labels else "class names from the model's metadata"
    else:
        names_note = "no class names: results carry class ids"
    summary = (
        f"model: {_dims(model_input.shape)} {model_input.dtype.name} {layout.upper()}, {outputs.summary} -> "
        f"{_postprocess_name(outputs)} post-processing ({names_note}); frames {notes}"
    )
    return ModelGuess(path, model_input, preprocess, outputs, summary)


def detect_document(
    guess: ModelGuess,
    source: str,
    out_dir: Path,
    base_dir: Path,
    *,
    max_frames: int | None = None,
    score_threshold: float | None = None,
) -> dict[str, Any]:
    """The pipeline file `edge-sdk detect` runs, as a YAML-ready document whose paths are relative
    to `base_dir` (where the file lies, or the working directory): the guessed model settings, one
    source, an annotated video and a JSONL file in `out_dir`."""
    postprocess = guess.postprocess
    if score_threshold is not None:  # validated: a YOLO threshold must be above 0
        postprocess = type(postprocess).model_validate({**postprocess.model_dump(), "score_threshold": score_threshold})
    source_entry: dict[str, Any] = {"uri": _relative_uri(source_uri(source), base_dir)}
    if max_frames is not None:
        source_entry["max_frames"] = max_frames
    return {
        "name": guess.model.stem,
        "model": {"path": _relative(guess.model, base_dir)},
        "preprocess": _shown(guess.preprocess, ("resize", "resize_mode", "color", "layout", "dtype")),
        "sources": [source_entry],
        "postprocess": _shown(postprocess, _POSTPROCESS_SHOWN.get(postprocess.type, ("type",))),
        "sinks": [
            {"type": "video", "path": _relative(out_dir / "annotated.mp4", base_dir)},
            {"type": "jsonl", "path": _relative(out_dir / "results.jsonl", base_dir)},
        ],
    }


def pipeline_from_document(document: dict[str, Any], base_dir: Path) -> PipelineConfig:
    """The validated pipeline of `document`, its relative paths starting from `base_dir`."""
    return PipelineConfig.model_validate(document).resolved(base_dir)


def write_pipeline_file(document: dict[str, Any], path: Path, comment: str) -> PipelineConfig:
    """Write `document` (made with `base_dir` = the file's folder) as a pipeline file headed by
    `comment`, after checking it validates; returns the pipeline as `load_pipeline` reads it back."""
    pipeline_from_document(document, path.parent)  # refuse to write what would not load
    header = "".join(f"# {line}\n" if line else "#\n" for line in comment.splitlines())
    path.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.dump(document, Dumper=_PipelineDumper, sort_keys=False, allow_unicode=True)
    path.write_text(header + text, encoding="utf-8")
    return load_pipeline(path)


class _PipelineDumper(yaml.SafeDumper):
    """Block mappings, and lists of plain values on one line (`resize: [320, 320]`), as the shipped files read."""


def _represent_list(dumper: yaml.SafeDumper, items: list[Any]) -> yaml.Node:
    flat = all(not isinstance(item, dict | list) for item in items)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", items, flow_style=flat)


_PipelineDumper.add_representer(list, _represent_list)


def source_uri(argument: str) -> str:
    """A source as a user names it on the command line -> a pipeline source URI: a folder becomes
    images://FOLDER; a video path, a camera index, /dev/videoN and any URI stay as they are."""
    if argument.startswith("/dev/video"):
        return f"v4l2://{argument}"
    parts = split_source_uri(argument)
    if parts.scheme == "file" and "://" not in argument and Path(argument).expanduser().is_dir():
        return f"images://{argument}"
    return argument


_POSTPROCESS_SHOWN = {
    "yolo": ("type", "version", "output", "score_threshold", "iou_threshold", "labels"),
    "ssd": ("type", "boxes", "scores", "classes", "count", "score_threshold", "labels"),
    "classification": ("type", "output", "top_k", "softmax", "labels"),
}
"""Settings a saved pipeline states even at their defaults, so a user sees what to edit."""


def _shown(spec: Any, always: Sequence[str]) -> dict[str, Any]:
    everything = spec.model_dump(mode="json")
    changed = spec.model_dump(mode="json", exclude_defaults=True)
    return {key: value for key, value in everything.items() if key in always or key in changed}


def _layout(model_input: TensorMeta) -> str:
    shape = model_input.shape
    if len(shape) != 4:
        raise ModelError(
            f"model input {model_input.describe()} is not an image batch (4 dimensions: NCHW or NHWC); "
            "detect feeds camera frames"
        )
    if shape[1] == 3:
        return "nchw"
    if shape[3] == 3:
        return "nhwc"
    for axis in (1, 3):
        channels = shape[axis]
        if isinstance(channels, int) and channels <= 4:
            raise ModelError(
                f"model input {model_input.describe()} has {channels} channel{'' if channels == 1 else 's'} "
                f"(axis {axis}); the SDK feeds 3-channel colour frames, so the model needs a [N, 3, H, W] "
                "or [N, H, W, 3] input"
            )
    return "nhwc" if model_input.dtype.name == "uint8" else "nchw"  # TF's uint8 image tensors are NHWC


def _fixed_size(model_input: TensorMeta, layout: str) -> tuple[int, int] | None:
    height, width = model_input.shape[2:] if layout == "nchw" else model_input.shape[1:3]
    return (width, height) if isinstance(width, int) and isinstance(height, int) else None


def _preprocess(
    model_input: TensorMeta,
    layout: str,
    fixed: tuple[int, int] | None,
    family: str,
    known_size: tuple[tuple[int, int], str] | None,
) -> tuple[PreprocessSpec, str]:
    """The preprocessing, and how frames are fed, in words. `known_size` is what the model says
    beside its input shape (Ultralytics' imgsz, the resize inside an SSD graph)."""
    dtype = model_input.dtype.name
    if dtype not in ("uint8", "float32"):
        raise ModelError(
            f"model input {model_input.describe()} takes {dtype}; the SDK feeds uint8 or float32 frames "
            "(export the model with a float32 input)"
        )
    size: tuple[int, int] | None = fixed
    if fixed is not None:
        sized = f"resized to {fixed[0]}x{fixed[1]}"
    elif known_size is not None:
        size = known_size[0]
        sized = f"resized to {size[0]}x{size[1]} ({known_size[1]})"
    elif dtype == "float32":
        size = DEFAULT_SIZES.get(family, (224, 224))
        sized = f"resized to {size[0]}x{size[1]} (the input has no fixed size; assumed)"
    else:
        sized = "at their own size (the input takes any size)"
    mode = "letterbox" if family.startswith("yolo") else "stretch"
    if size is not None and mode == "letterbox":
        sized = sized.replace("resized", "letterboxed", 1)
    spec = PreprocessSpec(
        resize=size,
        resize_mode=mode,
        color="rgb",
        layout=layout,
        dtype=dtype,
        scale=FLOAT_SCALE if dtype == "float32" else 1.0,
    )
    scaled = ", scaled by 1/255" if dtype == "float32" else ""
    return spec, f"{sized}, RGB (assumed){scaled}"


def _postprocess_name(outputs: OutputGuess) -> str:
    spec = outputs.spec
    return f"yolo {spec.version}" if spec.type == "yolo" else spec.type


def _producers(proto: Any) -> dict[str, str]:
    """For each graph output, the type of the node computing it."""
    outputs = {meta.name for meta in proto.graph.output}
    return {name: node.op_type for node in proto.graph.node for name in node.output if name in outputs}


def _ssd_resize(proto: Any) -> tuple[int, int] | None:
    """[width, height] a TF Object Detection API graph resizes every image to, when it is one: fed
    at that size already (folded, in uint8), its own float resize has nothing left to do."""
    try:
        height, width = find_ssd_head(proto).input_size
    except ModelError:
        return None
    return (width, height)


def _metadata_labels(metadata: dict[str, str]) -> list[str]:
    """Class names from Ultralytics' `names` ("{0: 'person', 1: 'bicycle'}") or a `labels` list."""
    for key in ("names", "labels"):
        value = _literal(metadata.get(key))
        if isinstance(value, dict) and all(isinstance(k, int) for k in value):
            return [str(value[k]) for k in sorted(value)]
        if isinstance(value, list | tuple):
            return [str(item) for item in value]
    return []


def _metadata_size(metadata: dict[str, str]) -> tuple[int, int] | None:
    """Ultralytics' `imgsz` ([height, width]) as [width, height]."""
    value = _literal(metadata.get("imgsz"))
    if (
        isinstance(value, list | tuple)
        and len(value) == 2
        and all(isinstance(side, int) and side > 0 for side in value)
    ):
        return (value[1], value[0])
    return None


def _literal(text: str | None) -> Any:
    if not text:
        return None
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None


def _relative(path: Path, base_dir: Path) -> str:
    """`path` from `base_dir` when the two share a folder below the root (the file moves with its
    project), else absolute (a relative path through / breaks as soon as either moves)."""
    absolute, base = os.path.abspath(path), os.path.abspath(base_dir)
    if os.path.commonpath([absolute, base]) == os.sep:
        return absolute
    return os.path.relpath(absolute, base)


def _relative_uri(uri: str, base_dir: Path) -> str:
    """A local path (plain or images://) rewritten relative to `base_dir`; other URIs as they are."""
    parts = split_source_uri(uri)
    if parts.scheme == "file" and "://" not in uri:
        return _relative(Path(uri).expanduser(), base_dir)
    if parts.scheme == "images" and not parts.query:
        return f"images://{_relative(Path(parts.location).expanduser(), base_dir)}"
    return uri


def _dims(shape: Sequence[Dim]) -> str:
    return "x".join(str(dim) if isinstance(dim, int) else "?" for dim in shape)
