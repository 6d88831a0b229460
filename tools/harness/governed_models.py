"""Classifiers whose cost or failure depends on the frame, for the circuit breaker's tests and bench.

Both are `onnx_models.float_classifier` (float32 NCHW [N, 3, size, size] -> logits [N, classes])
with a side branch that adds 0 to the logits, so their answers are the plain classifier's: a
fallback built from `float_classifier` with the same seed gives the same classes. The branch reads
how red the frame is, |mean(channel 0) - mean(channel 2)| (0 for grey, 1 for pure red or blue):

- `slow_when_red`: above 0.5 it runs `iterations` x (red - 0.5) x 2 products of a 256x256 matrix
  in an ONNX Loop, so a red frame costs what `iterations` products cost and a grey one nothing;
- `failing_when_red`: above 0.5 it gathers index 7 of a 2-element tensor, which ONNX Runtime refuses
  ("indices element out of data bounds"): the engine call raises on red frames only.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .onnx_models import float_classifier, make_model

MATRIX = 256


def slow_when_red(path: Path, iterations: int = 200, classes: int = 4, size: int = 8) -> Path:
    """The classifier, slowed on red frames by up to `iterations` 256x256 matrix products."""
    rng = np.random.default_rng(3)
    weight = (rng.standard_normal((MATRIX, MATRIX)) / np.sqrt(MATRIX)).astype(np.float32)
    body = helper.make_graph(
        [
            helper.make_node("MatMul", ["v_in", "loop_w"], ["product"]),
            helper.make_node("Tanh", ["product"], ["v_out"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "slow_body",
        [
            helper.make_tensor_value_info("iteration", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [MATRIX, MATRIX]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [MATRIX, MATRIX]),
        ],
    )
    nodes = [
        helper.make_node("Sub", ["redness", "half"], ["over_half"]),
        helper.make_node("Relu", ["over_half"], ["over"]),
        helper.make_node("Mul", ["over", "twice_iterations"], ["trips_float"]),
        helper.make_node("Cast", ["trips_float"], ["trips"], to=TensorProto.INT64),
        helper.make_node("Loop", ["trips", "", "loop_v0"], ["loop_v"], body=body),
        helper.make_node("ReduceSum", ["loop_v"], ["loop_sum"], keepdims=0),
        helper.make_node("Mul", ["loop_sum", "zero"], ["side"]),
    ]
    constants = [
        numpy_helper.from_array(weight, "loop_w"),
        numpy_helper.from_array(np.eye(MATRIX, dtype=np.float32), "loop_v0"),
        numpy_helper.from_array(np.array(2.0 * iterations, np.float32), "twice_iterations"),
    ]
    return _with_side_branch(path, classes, size, nodes, constants)


def failing_when_red(path: Path, classes: int = 4, size: int = 8) -> Path:
    """The classifier, whose engine call raises on red frames."""
    nodes = [
        helper.make_node("Greater", ["redness", "half"], ["is_red"]),
        helper.make_node("Cast", ["is_red"], ["is_red_int"], to=TensorProto.INT64),
        helper.make_node("Mul", ["is_red_int", "seven"], ["index"]),
        helper.make_node("Gather", ["two_values", "index"], ["picked"]),
        helper.make_node("Mul", ["picked", "zero"], ["side"]),
    ]
    constants = [
        numpy_helper.from_array(np.array([0.0, 0.0], np.float32), "two_values"),
        numpy_helper.from_array(np.array(7, np.int64), "seven"),
    ]
    return _with_side_branch(path, classes, size, nodes, constants)


def _with_side_branch(
    path: Path, classes: int, size: int, nodes: list[onnx.NodeProto], constants: list[onnx.TensorProto]
) -> Path:
    """float_classifier's graph, its logits + 0 x `side` (a scalar the nodes compute from `redness`)."""
    base = onnx.load(str(float_classifier(path, classes=classes, size=size)))
    graph = base.graph
    for node in graph.node:
        node.output[:] = ["core_logits" if name == "logits" else name for name in node.output]
    redness = [
        helper.make_node("ReduceMean", ["images", "mean_axes"], ["channel_means"], keepdims=0),
        helper.make_node("Gather", ["channel_means", "first"], ["channel_first"]),
        helper.make_node("Gather", ["channel_means", "last"], ["channel_last"]),
        helper.make_node("Sub", ["channel_first", "channel_last"], ["difference"]),
        helper.make_node("Abs", ["difference"], ["redness"]),
    ]
    graph.node.extend([*redness, *nodes, helper.make_node("Add", ["core_logits", "side"], ["logits"])])
    graph.initializer.extend(
        [
            numpy_helper.from_array(np.array([0, 2, 3], np.int64), "mean_axes"),
            numpy_helper.from_array(np.array(0, np.int64), "first"),
            numpy_helper.from_array(np.array(2, np.int64), "last"),
            numpy_helper.from_array(np.array(0.5, np.float32), "half"),
            numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
            *constants,
        ]
    )
    model = make_model(graph)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path
