"""YOLO detectors exported without NMS: decode the raw head, then suppress overlaps.

v8 (Ultralytics YOLOv8 / YOLO11 exports): [N, 4 + classes, anchors], per anchor cx, cy, w, h in
model-input pixels and one probability per class, no objectness. The transposed
[N, anchors, 4 + classes] is accepted when the shape says which axis holds the classes.
v5 (YOLOv5 exports): [N, anchors, 5 + classes], cx, cy, w, h, objectness, class probabilities;
a box scores objectness x class probability.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
from pydantic import Field

from edge_sdk.core.errors import ModelError
from edge_sdk.core.geometry import InputGeometry
from edge_sdk.core.results import Detection, FrameMeta, Result
from edge_sdk.core.tensor_meta import TensorMeta

from .base import Postprocessor, PostprocessSpecBase, label_for
from .nms import nms

_SCORE_SLACK = 1e-3
"""How far above 1 a probability may stray (fp16 rounding) before the output is called not-probabilities."""


class YoloSpec(PostprocessSpecBase):
    type: Literal["yolo"] = Field(description="Decode a raw YOLO head (box and class scores per anchor), then NMS.")
    version: Literal["v8", "v5"] = Field(
        "v8",
        description="v8: [N, 4 + classes, anchors] (or [N, anchors, 4 + classes]), no objectness (YOLOv8, YOLO11). "
        "v5: [N, anchors, 5 + classes] with objectness; score = objectness x class probability.",
    )
    output: str = Field("output0", description="Model output holding the raw head.")
    score_threshold: float = Field(0.25, gt=0.0, le=1.0, description="Drop boxes scoring below this.")
    iou_threshold: float = Field(
        0.45, ge=0.0, le=1.0, description="NMS drops a box that overlaps a better-scoring one by more than this IoU."
    )
    max_detections: int = Field(300, ge=1, description="Keep at most this many boxes per frame, best first.")
    class_agnostic_nms: bool = Field(
        False, description="A box suppresses overlapping boxes of every class, not only of its own."
    )
    labels: list[str] = Field(
        default_factory=list,
        description="Class names by class id; when given, the output must have exactly this many classes.",
    )

    def build(self) -> YoloPostprocessor:
        return YoloPostprocessor(self)


class YoloPostprocessor(Postprocessor):
    def __init__(self, spec: YoloSpec):
        self.spec = spec
        self._box_values = 4 if spec.version == "v8" else 5
        self._classes = len(spec.labels) or None

    def required_outputs(self) -> Sequence[str]:
        return [self.spec.output]

    def check_outputs(self, outputs: Sequence[TensorMeta]) -> None:
        """Also check the output's rank and, when labels give the class count, its fixed sizes."""
        super().check_outputs(outputs)
        meta = next(meta for meta in outputs if meta.name == self.spec.output)
        if len(meta.shape) != 3:
            raise ModelError(f"yolo output {meta.describe()}: expected 3 dimensions {self._layouts('N, ')}")
        if self._classes is None:
            return
        axes = (1, 2) if self.spec.version == "v8" else (2,)
        fixed = [meta.shape[axis] for axis in axes if isinstance(meta.shape[axis], int)]
        if fixed and self._values_per_anchor() not in fixed:
            raise ModelError(
                f"yolo output {meta.describe()}: expected {self._values_text()} {self._layouts('N, ')}, "
                f"got {' or '.join(map(str, fixed))}"
            )

    def __call__(self, outputs: Mapping[str, np.ndarray], frame: FrameMeta, geometry: InputGeometry) -> Result:
        spec = self.spec
        head = self._channels_first(np.asarray(outputs[spec.output]))  # [values, anchors]
        class_scores = head[self._box_values :]
        best = class_scores.max(axis=0)
        if spec.version == "v5":
            best = best * head[4]
        candidates = np.flatnonzero(best >= spec.score_threshold)
        if candidates.size == 0:
            return Result(frame=frame)
        scores = best[candidates].astype(np.float32)
        if scores.max() > 1.0 + _SCORE_SLACK:
            raise ModelError(
                f"yolo output '{spec.output}': expected class scores in [0, 1] (a head exported with its "
                f"sigmoid), got {float(scores.max()):.3g}"
            )
        class_ids = class_scores[:, candidates].argmax(axis=0)
        cx, cy, w, h = head[:4, candidates].astype(np.float32)
        w, h = np.maximum(w, 0.0), np.maximum(h, 0.0)
        boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)
        keep = nms(
            boxes, scores, None if spec.class_agnostic_nms else class_ids, spec.iou_threshold, spec.max_detections
        )
        framed = geometry.to_frame(boxes[keep])
        framed[:, [0, 2]] = np.clip(framed[:, [0, 2]], 0.0, frame.width)
        framed[:, [1, 3]] = np.clip(framed[:, [1, 3]], 0.0, frame.height)
        kept_scores = np.clip(scores[keep], 0.0, 1.0)
        kept_classes = class_ids[keep]
        detections = tuple(
            Detection(
                x1=float(x1),
                y1=float(y1),
                x2=float(x2),
                y2=float(y2),
                score=float(score),
                class_id=int(class_id),
                label=label_for(spec.labels, int(class_id)),
            )
            for (x1, y1, x2, y2), score, class_id in zip(framed.tolist(), kept_scores, kept_classes, strict=True)
        )
        return Result(frame=frame, detections=detections)

    def _channels_first(self, raw: np.ndarray) -> np.ndarray:
        """One frame's head as [values, anchors] (a view), after checking its shape."""
        if raw.ndim != 2:
            raise ModelError(
                f"yolo output '{self.spec.output}': expected one frame as {self._layouts('')}, got shape {raw.shape}"
            )
        rows, cols = raw.shape
        if self.spec.version == "v5":
            values_axis = 1
        elif self._classes is not None:
            values_axis = 0 if rows == self._values_per_anchor() or cols != self._values_per_anchor() else 1
        else:
            # Without labels the class count is unknown; a detection head has more anchors than values.
            values_axis = 0 if rows <= cols else 1
        values = raw.shape[values_axis]
        if (self._classes is not None and values != self._values_per_anchor()) or values <= self._box_values:
            raise ModelError(
                f"yolo output '{self.spec.output}': expected {self._values_text()} {self._layouts('')}, "
                f"got shape {raw.shape}"
            )
        return raw if values_axis == 0 else raw.T

    def _values_per_anchor(self) -> int:
        return self._box_values + (self._classes or 0)

    def _values_text(self) -> str:
        box = "4 box values" if self.spec.version == "v8" else "4 box values + objectness"
        if self._classes is None:
            return f"{box} + at least 1 class per anchor"
        return f"{box} + {self._classes} classes (the labels) = {self._values_per_anchor()} values per anchor"

    def _layouts(self, batch: str) -> str:
        if self.spec.version == "v8":
            return f"[{batch}4 + classes, anchors] or [{batch}anchors, 4 + classes]"
        return f"[{batch}anchors, 5 + classes]"
