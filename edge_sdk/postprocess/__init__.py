"""Post-processors, chosen by `type:` in the pipeline file."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from .base import Postprocessor
from .classification import ClassificationPostprocessor, ClassificationSpec
from .ssd import SsdPostprocessor, SsdSpec

PostprocessSpec = Annotated[SsdSpec | ClassificationSpec, Field(discriminator="type")]

POSTPROCESSORS: dict[str, type[Postprocessor]] = {
    "ssd": SsdPostprocessor,
    "classification": ClassificationPostprocessor,
}


def build_postprocessor(spec: SsdSpec | ClassificationSpec) -> Postprocessor:
    return POSTPROCESSORS[spec.type](spec)  # type: ignore[call-arg]


__all__ = ["POSTPROCESSORS", "PostprocessSpec", "Postprocessor", "build_postprocessor"]
