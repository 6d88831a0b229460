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
    boxes: str = Field("detection_boxes:0", description="Output with [N, K, 4] normalised boxes.")
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
        detections = []
        for i in keep:
            b = np.clip(boxes[i], 0.0, 1.0)
            y1, x1, y2, x2 = b if spec.box_order == "yxyx" else (b[1], b[0], b[3], b[2])
            class_id = int(classes[i]) - spec.class_offset
            detections.append(
                Detection(
                    x1=float(x1) * frame.width,
                    y1=float(y1) * frame.height,
                    x2=float(x2) * frame.width,
                    y2=float(y2) * frame.height,
                    score=float(scores[i]),
                    class_id=class_id,
                    label=label_for(spec.labels, class_id),
                )
            )
        return Result(frame=frame, detections=tuple(detections))
