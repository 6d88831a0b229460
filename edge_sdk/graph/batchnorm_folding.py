"""Fold an inference-mode BatchNormalization into the Conv that feeds it."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from .graph_edit import (
    constant_values,
    consumers,
    copy_model,
    drop_value_info,
    producers,
    prune,
    rename_tensor,
    unique_name,
)

_FLOATS = (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16)


class BatchNormFolding:
    """Conv -> BatchNormalization becomes one Conv with scaled weights and a shifted bias.

    y = (conv(x, W) + b - mean) * gamma / sqrt(var + eps) + beta, so with s = gamma / sqrt(var + eps):
    W' = W * s (per output channel), b' = (b - mean) * s + beta. Folded only when the Conv output
    feeds that BatchNormalization alone and every parameter is a constant; the arithmetic runs in
    float64 and is stored in the weights' own type. New initializers get new names, so weights
    shared with another node stay as they were.
    """

    name = "batchnorm_folding"

    def __init__(self) -> None:
        self.detail = ""

    def apply(self, model: onnx.ModelProto) -> onnx.ModelProto:
        model = copy_model(model)
        graph = model.graph
        constants = constant_values(graph)
        outputs = {o.name for o in graph.output}
        folded = 0
        for bn in list(graph.node):
            conv = self._foldable_conv(bn, graph, constants, outputs)
            if conv is None:
                continue
            weight, bias = _folded_parameters(bn, conv, constants)
            weight_name = unique_name(graph, f"{conv.input[1]}_bn")
            graph.initializer.append(numpy_helper.from_array(weight, weight_name))
            bias_name = unique_name(graph, f"{bn.name or conv.output[0]}_bias")
            graph.initializer.append(numpy_helper.from_array(bias, bias_name))
            constants[weight_name], constants[bias_name] = weight, bias
            conv.input[:] = [conv.input[0], weight_name, bias_name]
            conv_out = conv.output[0]
            graph.node.remove(bn)
            drop_value_info(graph, conv_out)
            rename_tensor(graph, conv_out, bn.output[0])  # the Conv now writes what BN wrote
            folded += 1
        prune(graph)
        self.detail = f"folded {folded} BatchNormalization" if folded else ""
        return model

    @staticmethod
    def _foldable_conv(
        bn: onnx.NodeProto, graph: onnx.GraphProto, constants: dict[str, np.ndarray], outputs: set[str]
    ) -> onnx.NodeProto | None:
        if bn.op_type != "BatchNormalization" or bn.domain not in ("", "ai.onnx") or len(bn.input) != 5:
            return None
        readers = consumers(graph)
        if any(out and (readers.get(out) or out in outputs) for out in bn.output[1:]):
            return None  # running statistics are read: training graph
        attributes = {a.name: onnx.helper.get_attribute_value(a) for a in bn.attribute}
        if attributes.get("training_mode", 0) or attributes.get("spatial", 1) != 1:
            return None
        if not all(name in constants for name in bn.input[1:]):
            return None
        conv = producers(graph).get(bn.input[0])
        if conv is None or conv.op_type != "Conv" or conv.domain not in ("", "ai.onnx"):
            return None
        if len(readers.get(conv.output[0], [])) != 1 or conv.output[0] in outputs:
            return None  # something else reads the un-normalised Conv output
        weight = constants.get(conv.input[1]) if len(conv.input) > 1 else None
        has_bias = len(conv.input) > 2 and conv.input[2]
        if weight is None or (has_bias and conv.input[2] not in constants):
            return None
        if numpy_helper.from_array(weight).data_type not in _FLOATS:
            return None
        return conv


def _folded_parameters(
    bn: onnx.NodeProto, conv: onnx.NodeProto, constants: dict[str, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    gamma, beta, mean, var = (constants[name].astype(np.float64) for name in bn.input[1:])
    epsilon = next((a.f for a in bn.attribute if a.name == "epsilon"), 1e-5)
    weight = constants[conv.input[1]]
    bias = constants[conv.input[2]].astype(np.float64) if len(conv.input) > 2 and conv.input[2] else 0.0
    scale = gamma / np.sqrt(var + epsilon)
    # Conv weights are [out_channels, in_channels / group, *kernel]: scale along axis 0.
    shape = (-1,) + (1,) * (weight.ndim - 1)
    new_weight = (weight.astype(np.float64) * scale.reshape(shape)).astype(weight.dtype)
    new_bias = ((bias - mean) * scale + beta).astype(weight.dtype)
    return new_weight, new_bias
