"""The SDK's FP32 reference for a model: ONNX Runtime on the CPU with graph optimisation off, the model
as the user brought it. The equivalence gate and `edge-sdk compare` measure every engine against it,
whatever backend built the engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edge_sdk.core.errors import ModelError

from .library import import_onnxruntime
from .runner import SessionRunner


class ReferenceRunner(SessionRunner):
    """The model as the user brought it: ONNX Runtime on the CPU, FP32, no graph optimisation."""

    def __init__(self, model_path: Path):
        super().__init__()
        self.model_path = model_path

    def _open_session(self) -> Any:
        ort = import_onnxruntime()
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        try:
            return ort.InferenceSession(str(self.model_path), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime's own exception types
            raise ModelError(
                f"ONNX Runtime cannot load {self.model_path}: {str(exc).strip().splitlines()[0]}"
            ) from None
