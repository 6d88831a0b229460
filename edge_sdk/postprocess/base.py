"""The post-processor role: one frame's raw engine outputs -> detections and classifications."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

from edge_sdk.core.errors import ModelError
from edge_sdk.core.geometry import InputGeometry
from edge_sdk.core.results import FrameMeta, Result
from edge_sdk.core.tensor_meta import TensorMeta


class Postprocessor(ABC):
    @abstractmethod
    def required_outputs(self) -> Sequence[str]:
        """Engine outputs this post-processor reads."""

    @abstractmethod
    def __call__(self, outputs: Mapping[str, np.ndarray], frame: FrameMeta, geometry: InputGeometry) -> Result:
        """`outputs` hold one frame each (batch axis removed); `geometry` maps model-input pixels to the frame."""

    def check_outputs(self, outputs: Sequence[TensorMeta]) -> None:
        names = {meta.name for meta in outputs}
        missing = [name for name in self.required_outputs() if name not in names]
        if missing:
            raise ModelError(
                f"post-processor expects model outputs {missing}, the model has {sorted(names)} "
                "(set the output names under postprocess:)"
            )


class PostprocessSpecBase(BaseModel):
    """A post-processor's settings in the pipeline file (`type:` picks the kind)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @abstractmethod
    def build(self) -> Postprocessor:
        """The post-processor these settings describe."""


def label_for(labels: Sequence[str], class_id: int) -> str:
    return labels[class_id] if 0 <= class_id < len(labels) else str(class_id)
