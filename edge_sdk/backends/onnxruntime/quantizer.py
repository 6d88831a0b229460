"""ONNX Runtime's INT8 hook for the toolkit: its QDQ quantiser, its calibrators, and CPU sessions as
the reference a quantised model is judged against."""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from .library import import_onnxruntime

if TYPE_CHECKING:
    import onnx

    from ..calibration.settings import Int8Settings
    from ..int8.quantizer import CalibratedRanges
    from .quantize import TensorRanges


def _quantize() -> ModuleType:
    """quantize.py, imported on first use: it loads onnx (about a second), which the registry that
    holds this hook must not cost every `edge-sdk` command."""
    return importlib.import_module(f"{__package__}.quantize")


class OnnxRuntimeQuantizer:
    """`Quantizer` (backends/int8/quantizer.py) with onnxruntime.quantization."""

    def prepare(self, model_path: Path, out_path: Path) -> Path:
        prepared: Path = _quantize().prepare_for_quantization(model_path, out_path)
        return prepared

    def calibrate(
        self, model_path: Path, samples: Iterable[Mapping[str, np.ndarray]], settings: Int8Settings
    ) -> TensorRanges:
        ranges: TensorRanges = _quantize().calibrate(model_path, samples, settings)
        return ranges

    def quantize(
        self,
        model_path: Path,
        ranges: CalibratedRanges,
        settings: Int8Settings,
        exclude_nodes: Sequence[str] = (),
        only_nodes: Sequence[str] | None = None,
    ) -> onnx.ModelProto:
        quantize = _quantize()
        if not isinstance(ranges, quantize.TensorRanges):
            raise TypeError(f"expected ranges calibrated by ONNX Runtime, got {type(ranges).__name__}")
        model: onnx.ModelProto = quantize.quantize_with_ranges(model_path, ranges, settings, exclude_nodes, only_nodes)
        return model

    def quantizable_nodes(self, model: onnx.ModelProto | Path) -> list[str]:
        nodes: list[str] = _quantize().quantizable_nodes(model)
        return nodes

    def pass_through_op_types(self) -> frozenset[str]:
        import_onnxruntime()
        from onnxruntime.quantization.operators.activation import QDQRemovableActivation
        from onnxruntime.quantization.operators.direct_q8 import QDQDirect8BitOp
        from onnxruntime.quantization.registry import QDQRegistry

        return frozenset(
            op for op, kind in QDQRegistry.items() if issubclass(kind, QDQDirect8BitOp | QDQRemovableActivation)
        )

    def session(self, model: onnx.ModelProto | Path, *, optimize: bool = True) -> Any:
        ort = import_onnxruntime()
        options = ort.SessionOptions()
        options.graph_optimization_level = (
            ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        )
        source = str(model) if isinstance(model, Path) else model.SerializeToString()
        return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
