"""Classifiers: top-k classes from a logits or probabilities vector."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

import numpy as np
from pydantic import Field

from edge_sdk.core.geometry import InputGeometry
from edge_sdk.core.results import Classification, FrameMeta, Result

from .base import Postprocessor, PostprocessSpecBase, label_for


class ClassificationSpec(PostprocessSpecBase):
    type: Literal["classification"] = Field(description="Top-k classes from one score vector per frame.")
    output: str = Field(description="Model output with [N, classes] scores.")
    top_k: int = Field(1, ge=1, description="How many classes to report per frame.")
    softmax: bool = Field(False, description="Apply softmax first (the model outputs logits).")
    score_threshold: float = Field(0.0, ge=0.0, le=1.0, description="Drop classes scoring below this.")
    labels: list[str] = Field(default_factory=list, description="Class names by class id.")

    def build(self) -> ClassificationPostprocessor:
        return ClassificationPostprocessor(self)


class ClassificationPostprocessor(Postprocessor):
    def __init__(self, spec: ClassificationSpec):
        self.spec = spec

    def required_outputs(self) -> Sequence[str]:
        return [self.spec.output]

    def __call__(self, outputs: Mapping[str, np.ndarray], frame: FrameMeta, geometry: InputGeometry) -> Result:
        scores = outputs[self.spec.output].astype(np.float64).reshape(-1)
        if self.spec.softmax:
            exp = np.exp(scores - scores.max())
            scores = exp / exp.sum()
        top = np.argsort(-scores)[: self.spec.top_k]
        classes = tuple(
            Classification(int(i), label_for(self.spec.labels, int(i)), float(scores[i]))
            for i in top
            if scores[i] >= self.spec.score_threshold
        )
        return Result(frame=frame, classifications=classes)
