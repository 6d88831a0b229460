"""The one registry of tiny ONNX models that tests build on the fly (real ONNX, run by ONNX Runtime)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 18


def _save(graph: onnx.GraphProto, path: Path) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def float_classifier(path: Path, classes: int = 4, size: int = 8, batch: int | str = "N") -> Path:
    """float32 NCHW [batch, 3, size, size] -> Conv -> ReLU -> global pool -> Gemm -> logits [batch, classes]."""
    rng = np.random.default_rng(7)
    conv_w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "conv_w")
    conv_b = numpy_helper.from_array(np.zeros(8, np.float32), "conv_b")
    fc_w = numpy_helper.from_array(rng.standard_normal((classes, 8)).astype(np.float32), "fc_w")
    fc_b = numpy_helper.from_array(np.arange(classes, dtype=np.float32), "fc_b")
    nodes = [
        helper.make_node("Conv", ["images", "conv_w", "conv_b"], ["conv"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv"], ["relu"]),
        helper.make_node("GlobalAveragePool", ["relu"], ["pool"]),
        helper.make_node("Flatten", ["pool"], ["flat"]),
        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "float_classifier",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [batch, 3, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, classes])],
        [conv_w, conv_b, fc_w, fc_b],
    )
    return _save(graph, path)


def uint8_mean_classifier(path: Path, classes: int = 3) -> Path:
    """uint8 NHWC [N, H, W, 3] (any size) -> per-channel means as class scores [N, 3].

    Class 0 wins on red-heavy frames, 1 on green, 2 on blue (channels arrive RGB), so a test can
    predict the answer from the frame it feeds.
    """
    nodes = [
        helper.make_node("Cast", ["frames"], ["as_float"], to=TensorProto.FLOAT),
        helper.make_node("ReduceMean", ["as_float", "axes"], ["means"], keepdims=0),
        helper.make_node("Div", ["means", "scale"], ["scores"]),
    ]
    graph = helper.make_graph(
        nodes,
        "uint8_mean_classifier",
        [helper.make_tensor_value_info("frames", TensorProto.UINT8, ["N", "H", "W", 3])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", classes])],
        [
            numpy_helper.from_array(np.array([1, 2], dtype=np.int64), "axes"),
            numpy_helper.from_array(np.array(255.0, dtype=np.float32), "scale"),
        ],
    )
    return _save(graph, path)
