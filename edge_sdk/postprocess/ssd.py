"""SSD-style detectors whose graph already ran NMS (TensorFlow Object Detection API layout)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from edge_sdk.pipeline.geometry import InputGeometry
from edge_sdk.results import Detection, FrameMeta, Result

from .base import Postprocessor, label_for


class SsdSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["ssd"] = Field(description="Boxes, scores and classes already filtered by NMS in the graph.")
    boxes: str = Field(
        "detection_boxes:0", description="Output with [N, K, 4] boxes normalised to the model input (0..1)."
    )
    scores: str = Field("detection_scores:0", description="Output with [N, K] scores.")
    classes: str = Field("detection_classes:0", description="Output with [N, K] class ids.")
    count: str | None = Field("num_detections:0", description="Output with [N] valid detections; null = all K.")
    box_order: Literal["yxyx", "xyxy"] = Field("yxyx", description="Coordinate order inside each box.")
    class_offset: int = Field(1, description="Subtract from class ids before looking up labels (TF uses 1).")
    score_threshold: float = Field(0.5, ge=0.0, le=1.0, description="Drop detections scoring below this.")
    labels: list[str] = Field(default_factory=list, description="Class names by (offset) class id.")


class SsdPostprocessor(Postprocessor):
    def __init__(self, spec: SsdSpec):
        self.spec = spec

    def required_outputs(self) -> Sequence[str]:
        names = [self.spec.boxes, self.spec.scores, self.spec.classes]
        return names + ([self.spec.count] if self.spec.count else [])

    def __call__(self, outputs: Mapping[str, np.ndarray], frame: FrameMeta, geometry: InputGeometry) -> Result:
        spec = self.spec
        boxes, scores, classes = outputs[spec.boxes], outputs[spec.scores], outputs[spec.classes]
        count = int(outputs[spec.count]) if spec.count else len(scores)
        keep = np.flatnonzero(scores[:count] >= spec.score_threshold)
        corners = boxes[keep].astype(np.float32)
        if spec.box_order == "yxyx":
            corners = corners[:, [1, 0, 3, 2]]
        # Normalised to the model input; the input may hold the frame letterboxed.
        corners *= np.array([geometry.input_width, geometry.input_height] * 2, dtype=np.float32)
        framed = geometry.to_frame(corners)
        framed[:, [0, 2]] = np.clip(framed[:, [0, 2]], 0.0, frame.width)
        framed[:, [1, 3]] = np.clip(framed[:, [1, 3]], 0.0, frame.height)
        detections = []
        for (x1, y1, x2, y2), i in zip(framed.tolist(), keep, strict=True):
            class_id = int(classes[i]) - spec.class_offset
            detections.append(
                Detection(
                    x1=x1,
                    y1=y1,
                    x2=max(x1, x2),
                    y2=max(y1, y2),
                    score=float(scores[i]),
                    class_id=class_id,
                    label=label_for(spec.labels, class_id),
                )
            )
        return Result(frame=frame, detections=tuple(detections))
