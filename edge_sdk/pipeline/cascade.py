"""A second model that classifies what the first one found: crop each box, classify the crop.

The primary detector's `Result` comes in with the frame it was computed on; each selected box is
cropped (padded, clipped to the frame), put through the classifier's own preprocessing, run through
its engine (batched when the engine takes any batch size) and the classes are attached to the box as
`Detection.classifications`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from edge_sdk.backends.runner import EngineRunner
from edge_sdk.core.precision import Precision
from edge_sdk.core.preprocess import Preprocessor, PreprocessSpec
from edge_sdk.core.results import Detection, FrameMeta, Result
from edge_sdk.core.tensor_meta import select_input
from edge_sdk.postprocess.classification import ClassificationPostprocessor, ClassificationSpec


class CascadeSpec(BaseModel):
    """The secondary classifier and which of the primary detections it looks at."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: Path = Field(description="ONNX classifier run on crops of the detections; relative to the pipeline file.")
    input: str | None = Field(None, description="Input that receives the crops; needed when the model has several.")
    precision: Precision | None = Field(None, description="Engine precision; the profile's default when null.")
    preprocess: PreprocessSpec = Field(
        default_factory=PreprocessSpec, description="What the classifier expects; applied to each crop."
    )
    postprocess: ClassificationSpec = Field(description="How the classifier's output becomes classes.")
    labels: list[str] = Field(
        default_factory=list, description="Labels of the detections to classify; empty = every detection."
    )
    min_size: int = Field(0, ge=0, description="Skip boxes narrower or shorter than this, in frame pixels.")
    max_crops: int = Field(16, ge=1, description="Classify at most this many boxes per frame, best-scoring first.")
    padding: float = Field(
        0.0, ge=0.0, description="Grow each box on every side by this fraction of its width and height before cropping."
    )


class Cascade:
    """Built from a spec and an active runner of the secondary model; call it with (result, BGR frame)."""

    def __init__(self, spec: CascadeSpec, engine: EngineRunner):
        self.spec = spec
        self.engine = engine
        self.model_input = select_input(engine.inputs, spec.input, "cascade.input")
        self.preprocess = Preprocessor(spec.preprocess, self.model_input)
        self.classify = ClassificationPostprocessor(spec.postprocess)
        self.classify.check_outputs(engine.outputs)
        batch = self.model_input.shape[0]
        self.fixed_batch = batch if isinstance(batch, int) else None
        """Crops per engine call the model insists on; None = any number."""

    def __call__(self, result: Result, image: np.ndarray) -> Result:
        """A copy of `result` whose selected detections carry the classifier's classes."""
        crops = []
        for index in self._selected(result.detections):
            crop = self._crop(result.detections[index], image)
            if crop is not None:
                crops.append((index, crop))
        if not crops:
            return result
        rows = self._infer([self.preprocess(crop) for _, crop in crops])
        detections = list(result.detections)
        frame = result.frame
        for (index, crop), row in zip(crops, rows, strict=True):
            height, width = crop.shape[:2]
            meta = FrameMeta(frame.source, frame.index, frame.timestamp, width, height)
            classes = self.classify({self.spec.postprocess.output: row}, meta, self.preprocess.geometry(width, height))
            detections[index] = dataclasses.replace(detections[index], classifications=classes.classifications)
        return dataclasses.replace(result, detections=tuple(detections))

    def _selected(self, detections: Sequence[Detection]) -> list[int]:
        """Indices of the detections to classify: wanted label, big enough, best scores first."""
        spec = self.spec
        wanted = [
            index
            for index, det in enumerate(detections)
            if (not spec.labels or det.label in spec.labels)
            and det.x2 - det.x1 >= spec.min_size
            and det.y2 - det.y1 >= spec.min_size
        ]
        wanted.sort(key=lambda index: -detections[index].score)
        return wanted[: spec.max_crops]

    def _crop(self, det: Detection, image: np.ndarray) -> np.ndarray | None:
        """The padded box clipped to the image (a view), or None when nothing of it is inside."""
        pad_x, pad_y = (det.x2 - det.x1) * self.spec.padding, (det.y2 - det.y1) * self.spec.padding
        x1, y1 = max(0, math.floor(det.x1 - pad_x)), max(0, math.floor(det.y1 - pad_y))
        x2, y2 = min(image.shape[1], math.ceil(det.x2 + pad_x)), min(image.shape[0], math.ceil(det.y2 + pad_y))
        if x2 <= x1 or y2 <= y1:
            return None
        return image[y1:y2, x1:x2]

    def _infer(self, tensors: list[np.ndarray]) -> list[np.ndarray]:
        """One output row per tensor; as few engine calls as the model's batch size allows."""
        same_shape = len({tensor.shape for tensor in tensors}) == 1
        if self.fixed_batch is None:
            chunk = len(tensors) if same_shape else 1
        else:
            chunk = self.fixed_batch if same_shape else 1
        rows: list[np.ndarray] = []
        for start in range(0, len(tensors), chunk):
            part = tensors[start : start + chunk]
            # A model with a fixed batch larger than what is left gets the last crop repeated.
            filler = [part[-1]] * ((self.fixed_batch or len(part)) - len(part))
            outputs = self.engine.infer({self.model_input.name: np.concatenate(part + filler)})
            rows.extend(outputs[self.spec.postprocess.output][: len(part)])
        return rows


class NoCascade:
    """The null cascade for pipelines without one: results pass through untouched."""

    def __call__(self, result: Result, image: np.ndarray) -> Result:
        return result
