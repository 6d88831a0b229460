"""Shape inference pass: ONNX's own inference, with data propagation so shape subgraphs resolve."""

from __future__ import annotations

import logging

import onnx

from edge_sdk.core.errors import ModelError, first_line

from .graph_edit import copy_model

log = logging.getLogger(__name__)


class ShapeInference:
    """Annotate every intermediate tensor with the type and shape ONNX can infer.

    Old annotations are dropped first, so a model whose batch or input size changed gets fresh
    shapes rather than stale ones merged in.
    """

    name = "shape_inference"

    def __init__(self) -> None:
        self.detail = ""

    def apply(self, model: onnx.ModelProto) -> onnx.ModelProto:
        stripped = copy_model(model)
        del stripped.graph.value_info[:]
        inferred = infer_shapes(stripped)
        typed = len(inferred.graph.value_info)
        self.detail = f"{typed} intermediate tensors typed"
        return inferred


def infer_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """onnx.shape_inference on `model`. A model whose declared shapes contradict what its nodes
    compute still runs in ONNX Runtime, so that is a warning, and inference keeps what it could infer;
    a model inference cannot read at all raises ModelError."""
    try:
        return onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
    except onnx.shape_inference.InferenceError as exc:
        log.warning("shape inference: %s; keeping the shapes it could infer", first_line(exc))
    try:
        return onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
    except Exception as exc:  # ValidationError and friends
        raise ModelError(f"shape inference failed: {first_line(exc)}") from None
