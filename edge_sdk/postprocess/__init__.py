"""Post-processors, chosen by `type:` in the pipeline file."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from edge_sdk.core.kinds import kinds_of

from .base import Postprocessor, PostprocessSpecBase
from .classification import ClassificationSpec
from .custom import CallableSpec
from .ssd import SsdSpec
from .yolo import YoloSpec

AnyPostprocessSpec = SsdSpec | ClassificationSpec | YoloSpec | CallableSpec
"""Every kind of post-processor, declared once: the pipeline file's union, the names and the lookup come from it."""
PostprocessSpec = Annotated[AnyPostprocessSpec, Field(discriminator="type")]

POSTPROCESSORS: dict[str, type[BaseModel]] = kinds_of(AnyPostprocessSpec)
"""Post-processor specs by their `type:` name."""


def build_postprocessor(spec: AnyPostprocessSpec) -> Postprocessor:
    return spec.build()


__all__ = [
    "POSTPROCESSORS",
    "AnyPostprocessSpec",
    "PostprocessSpec",
    "PostprocessSpecBase",
    "Postprocessor",
    "build_postprocessor",
]
