"""Post-processors, chosen by `type:` in the pipeline file."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from .base import Postprocessor
from .classification import ClassificationPostprocessor, ClassificationSpec
from .custom import CallablePostprocessor, CallableSpec
from .ssd import SsdPostprocessor, SsdSpec
from .yolo import YoloPostprocessor, YoloSpec

AnyPostprocessSpec = SsdSpec | ClassificationSpec | YoloSpec | CallableSpec
PostprocessSpec = Annotated[AnyPostprocessSpec, Field(discriminator="type")]

POSTPROCESSORS: dict[str, type[Postprocessor]] = {
    "ssd": SsdPostprocessor,
    "classification": ClassificationPostprocessor,
    "yolo": YoloPostprocessor,
    "callable": CallablePostprocessor,
}


def build_postprocessor(spec: AnyPostprocessSpec) -> Postprocessor:
    return POSTPROCESSORS[spec.type](spec)  # type: ignore[call-arg]


__all__ = ["POSTPROCESSORS", "AnyPostprocessSpec", "PostprocessSpec", "Postprocessor", "build_postprocessor"]
