"""Which post-processor reads a model's outputs, told from their names and shapes alone.

Three families are recognised: SSD-style detections after NMS (boxes, scores, classes and a count,
as the TensorFlow Object Detection API exports them), a raw YOLO head (v8: [N, 4 + classes, anchors],
or transposed; v5: [N, anchors, 5 + classes]) and a classifier ([N, classes]). Anything else raises
`UnrecognisedOutputs`, which lists what the model has. `edge-sdk detect` builds its pipeline from
this; a pipeline file states the post-processor instead (docs/models.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from edge_sdk.core.errors import ModelError
from edge_sdk.core.tensor_meta import TensorMeta

from . import AnyPostprocessSpec
from .classification import ClassificationSpec
from .ssd import SsdSpec
from .yolo import YoloSpec

YOLO_STRIDES = (8, 16, 32)
"""The three detection scales of YOLOv5 and YOLOv8 exports; v5 has 3 anchors per cell, v8 one."""
GRID_UNITS = {32: 21, 64: 85}
"""On an input whose sides are multiples of the largest stride S, a YOLO head has (W/S)(H/S) times this
many cells: 16 + 4 + 1 at strides 8, 16, 32; 64 + 16 + 4 + 1 with the P6 models' extra stride 64."""
TOP_K = 5
"""Classes a guessed classifier reports per frame (fewer when the model has fewer)."""
GUIDE = "docs/models.md"


class UnrecognisedOutputs(ModelError):
    """The outputs are none of the shapes `guess_postprocess` knows; the message lists them."""

    def __init__(self, outputs: Sequence[TensorMeta]):
        found = "; ".join(_shape_text(meta) for meta in outputs) or "none"
        super().__init__(
            f"cannot tell how to read this model's outputs ({found}). detect knows SSD detections "
            "(boxes [1, K, 4], scores and classes [1, K], a count [1]), YOLOv5/v8 heads ([1, 4 + classes, "
            "anchors] or [1, anchors, 5 + classes]) and classifiers ([1, classes]). Write a pipeline file "
            f"whose postprocess: says how to read them (a callable: for your own decoder), see {GUIDE}, "
            "and run it with edge-sdk run PIPELINE.yaml"
        )
        self.outputs = tuple(outputs)


@dataclass(frozen=True)
class OutputGuess:
    spec: AnyPostprocessSpec
    """The post-processor that reads the outputs."""
    family: str
    """`ssd`, `yolov8`, `yolov5` or `classifier`."""
    summary: str
    """What the outputs look like, in words: 'outputs look like a YOLOv8 head with 18 classes'."""
    exact: bool = True
    """The outputs have the family's exact form, not only its shape: TF's or self-describing SSD names,
    a YOLO head whose anchor count is a YOLO grid's. A transformer's [1, 197, 768] has a YOLO head's
    rank and nothing else: what decides how a model is judged (the INT8 and equivalence gates) needs
    this, `edge-sdk detect`, which says what it guessed, does not."""


def guess_postprocess(
    outputs: Sequence[TensorMeta],
    *,
    input_size: tuple[int, int] | None = None,
    labels: Sequence[str] = (),
    produced_by: Mapping[str, str] | None = None,
) -> OutputGuess:
    """The post-processor for a model with these outputs.

    `input_size` ([width, height] of the model input, when known) tells a YOLOv5 head from a
    transposed v8 one by its anchor count; `labels` (class names, e.g. from the model's metadata) are
    used when their count fits, and also settle that case; `produced_by` maps an output to the type
    of the node computing it (a classifier ending in Softmax gives probabilities, else logits).
    """
    for guess in (_ssd(outputs, labels), _yolo(outputs, input_size, labels), _classifier(outputs, labels, produced_by)):
        if guess is not None:
            return guess
    raise UnrecognisedOutputs(outputs)


def _ssd(outputs: Sequence[TensorMeta], labels: Sequence[str]) -> OutputGuess | None:
    """TF Object Detection API outputs by their names (the `ssd` defaults), else by what the names say."""
    defaults = SsdSpec(type="ssd")
    by_name = {meta.name: meta for meta in outputs}
    names = [defaults.boxes, defaults.scores, defaults.classes, defaults.count]
    if all(name in by_name for name in names):
        spec = SsdSpec(type="ssd", labels=list(labels))
        return OutputGuess(spec, "ssd", "outputs look like SSD detections (TF Object Detection API names)")

    def named(word: str, rank: int) -> str | None:
        found = [meta.name for meta in outputs if word in meta.name.lower() and len(meta.shape) == rank]
        return found[0] if len(found) == 1 else None

    boxes, scores = named("box", 3), named("score", 2)
    classes = named("class", 2) or named("label", 2)
    if boxes is None or scores is None or classes is None:
        return None
    if isinstance(by_name[boxes].shape[-1], int) and by_name[boxes].shape[-1] != 4:
        return None
    count = named("num", 1) or named("count", 1)
    spec = SsdSpec(type="ssd", boxes=boxes, scores=scores, classes=classes, count=count, labels=list(labels))
    return OutputGuess(
        spec,
        "ssd",
        "outputs look like SSD detections (boxes, scores, classes"
        f"{', count' if count else ''}; TF's conventions assumed: normalised y1 x1 y2 x2 boxes, class ids from 1)",
    )


def _yolo(
    outputs: Sequence[TensorMeta], input_size: tuple[int, int] | None, labels: Sequence[str]
) -> OutputGuess | None:
    heads = [meta for meta in outputs if len(meta.shape) == 3]
    if len(heads) != 1:
        return None
    head = heads[0]
    rows, cols = head.shape[1], head.shape[2]
    if isinstance(rows, int) and (not isinstance(cols, int) or rows < cols):
        values_axis, values = 1, rows
    elif isinstance(cols, int) and (not isinstance(rows, int) or cols < rows):
        values_axis, values = 2, cols
    else:
        return None
    anchors = cols if values_axis == 1 else rows
    if values_axis == 1:  # only v8 puts the values first
        version = "v8"
    elif len(labels) in (values - 4, values - 5):
        version = "v8" if len(labels) == values - 4 else "v5"
    elif input_size is not None and isinstance(anchors, int) and anchors == _anchors(input_size, per_cell=1):
        version = "v8"
    else:
        version = "v5"  # [N, anchors, values]: YOLOv5's own layout
    classes = values - (4 if version == "v8" else 5)
    if classes < 1:
        return None
    fits = list(labels) if len(labels) == classes else []
    spec = YoloSpec(type="yolo", version=version, output=head.name, labels=fits)
    transposed = " (transposed: [1, anchors, 4 + classes])" if version == "v8" and values_axis == 2 else ""
    family = f"yolo{version}"
    summary = f"outputs look like a YOLO{version} head with {_classes(classes)}{transposed}"
    return OutputGuess(spec, family, summary, exact=isinstance(anchors, int) and _is_yolo_grid(anchors, version))


def _classifier(
    outputs: Sequence[TensorMeta], labels: Sequence[str], produced_by: Mapping[str, str] | None
) -> OutputGuess | None:
    if len(outputs) != 1:
        return None
    meta = outputs[0]
    shape = meta.shape
    if not (len(shape) == 2 or (len(shape) == 4 and shape[2:] == (1, 1))):
        return None
    classes = shape[1]
    if not isinstance(classes, int) or classes < 2:
        return None
    probabilities = (produced_by or {}).get(meta.name) == "Softmax"
    spec = ClassificationSpec(
        type="classification",
        output=meta.name,
        top_k=min(TOP_K, classes),
        softmax=not probabilities,
        labels=list(labels) if len(labels) == classes else [],
    )
    scores = "probabilities (it ends in Softmax)" if probabilities else "logits, softmax applied"
    return OutputGuess(spec, "classifier", f"outputs look like a classifier with {_classes(classes)} ({scores})")


def _is_yolo_grid(anchors: int, version: str) -> bool:
    cells, leftover = divmod(anchors, 1 if version == "v8" else 3)
    return leftover == 0 and any(cells % units == 0 for units in GRID_UNITS.values())


def _anchors(input_size: tuple[int, int], per_cell: int) -> int:
    width, height = input_size
    return per_cell * sum((width // stride) * (height // stride) for stride in YOLO_STRIDES)


def _classes(count: int) -> str:
    return f"{count} class{'' if count == 1 else 'es'}"


def _shape_text(meta: TensorMeta) -> str:
    dims = ", ".join(str(dim) if isinstance(dim, int) else (dim or "?") for dim in meta.shape)
    return f"{meta.name} {meta.dtype.name} [{dims}]"
