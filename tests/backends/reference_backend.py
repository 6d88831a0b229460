"""A backend that lives in the test tree: ONNX's own reference evaluator (onnx.reference), pure Python.
It is registered at test time only, to show that a backend is one object and one registry call."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Literal

import numpy as np
import onnx
from onnx.reference import ReferenceEvaluator
from pydantic import Field

from edge_sdk.backends.backend import Backend, BackendOptions, BuildFacts, EngineBuilder, Package
from edge_sdk.backends.runner import EngineRunner
from edge_sdk.core.errors import ConfigError
from edge_sdk.core.model_file import ModelFile
from edge_sdk.core.precision import Precision
from edge_sdk.core.tensor_meta import TensorMeta

NAME = "onnx-reference"
MODEL = "model.onnx"


class ReferenceOptions(BackendOptions):
    backend: Literal["onnx-reference"] = Field(description="Run engines with onnx.reference (slow, exact).")
    optimized: bool = Field(False, description="Ask the evaluator to optimise the graph first.")


class ReferenceBuilder(EngineBuilder):
    def version(self) -> str:
        return f"onnx-{onnx.__version__}"

    def check(self, options: Any, precision: Precision) -> None:
        if precision != "fp32":
            raise ConfigError(f"{NAME} builds fp32 only, got {precision}")

    def build(
        self, model: ModelFile, options: Any, precision: Precision, out_dir: Path, calibration: Any
    ) -> BuildFacts:
        shutil.copyfile(model.path, out_dir / MODEL)
        return {"evaluator": "onnx.reference", "nodes": len(onnx.load(str(model.path)).graph.node)}


class ReferenceRunner(EngineRunner):
    def __init__(self, directory: Path, options: Any, precision: Precision):
        self.path = directory / MODEL
        self.model = ModelFile.load(self.path)
        self.evaluator: ReferenceEvaluator | None = None

    def activate(self) -> None:
        self.evaluator = ReferenceEvaluator(str(self.path))

    def deactivate(self) -> None:
        self.evaluator = None

    @property
    def inputs(self) -> tuple[TensorMeta, ...]:
        return self.model.inputs

    @property
    def outputs(self) -> tuple[TensorMeta, ...]:
        return self.model.outputs

    def _infer(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        assert self.evaluator is not None, "activate() first"
        values = self.evaluator.run(None, feed)
        return {meta.name: np.asarray(value) for meta, value in zip(self.outputs, values, strict=True)}


REFERENCE_BACKEND = Backend(
    name=NAME,
    options=ReferenceOptions,
    builder=ReferenceBuilder,
    runner=ReferenceRunner,
    install_hint="pip install onnx",
    precisions=frozenset({"fp32"}),
    runs_on_cpu=lambda options: True,
    exact_uint8_resize=lambda options: False,
    devices=lambda options: "python (onnx.reference)",
    host_notes=lambda options: ["pure Python: for checking, not for speed"],
    packages=(Package(("onnx",), "onnx", "onnx-reference backend", "pip install onnx"),),
    doctor_facts=lambda: {"evaluator": "usable"},
)

PROFILE_YAML = """\
name: reference-box
description: Any host, ONNX's reference evaluator
detect: {}
precisions: [fp32]
default_precision: fp32
engine:
  backend: onnx-reference
  optimized: false
"""
