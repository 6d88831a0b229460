"""The pipeline file: model, preprocessing, sources, post-processing, sinks."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from edge_sdk.postprocess import PostprocessSpec
from edge_sdk.precision import Precision
from edge_sdk.sinks import SinkSpec
from edge_sdk.sources.spec import SourceSpec
from edge_sdk.yaml_model import load_yaml_model

from .preprocess import PreprocessSpec


class ModelSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    path: Path = Field(description="ONNX model; relative to the pipeline file.")
    input: str | None = Field(None, description="Input that receives frames; needed when the model has several.")
    precision: Precision | None = Field(None, description="Engine precision; the profile's default when null.")


class PipelineConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="Pipeline name, shown in logs and status.")
    profile: str | None = Field(None, description="Device profile; detected from the host when null.")
    model: ModelSpec = Field(description="The model and how to build its engine.")
    preprocess: PreprocessSpec = Field(
        default_factory=PreprocessSpec, description="What the model expects its input to look like."
    )
    sources: list[SourceSpec] = Field(min_length=1, description="Where frames come from.")
    postprocess: PostprocessSpec = Field(description="How raw model outputs become results, keyed on `type:`.")
    sinks: list[SinkSpec] = Field(default_factory=list, description="Where results go, each keyed on `type:`.")
    _base_dir: Path = PrivateAttr(default_factory=Path)

    @property
    def base_dir(self) -> Path:
        """Folder that relative paths in the file start from (the file's own folder once loaded)."""
        return self._base_dir

    def resolved(self, base_dir: Path) -> PipelineConfig:
        """A copy whose relative model and sink paths start from `base_dir`."""

        def rebase(path: Path) -> Path:
            path = path.expanduser()
            return path if path.is_absolute() else Path(os.path.normpath(base_dir / path))

        sinks = [
            sink.model_copy(update={"path": rebase(sink.path)}) if hasattr(sink, "path") else sink
            for sink in self.sinks
        ]
        model = self.model.model_copy(update={"path": rebase(self.model.path)})
        copy = self.model_copy(update={"model": model, "sinks": sinks})
        copy._base_dir = base_dir
        return copy


def load_pipeline(path: Path) -> PipelineConfig:
    """Load and validate a pipeline file; relative paths in it start from its folder."""
    return load_yaml_model(path, PipelineConfig).resolved(path.resolve().parent)
