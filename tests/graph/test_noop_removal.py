"""No-op removal on the shipped detector, the ResNet-shaped CNN, and small graphs with one no-op each."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from edge_sdk.graph import NoOpRemoval
from tools.harness import onnx_models

from .helpers import assert_same_outputs, images, ops


def _model(nodes: list[onnx.NodeProto], output_shape: list[int], inits: dict[str, np.ndarray]) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "noops",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, output_shape)],
        [numpy_helper.from_array(value, name) for name, value in inits.items()],
    )
    return onnx_models.make_model(graph, 17)


FEEDS = {"x": np.random.default_rng(5).standard_normal((2, 3, 4)).astype(np.float32)}


def test_noop_removal_when_detector_has_reshapes_to_their_own_shape_removes_them(
    detector: onnx.ModelProto, detector_feeds: dict[str, np.ndarray]
) -> None:
    # when
    removal = NoOpRemoval()
    cleaned = removal.apply(detector)
    # then: the [-1, C, 1, 1] Reshapes around the 1x1 feature maps go, outputs stay the same
    assert ops(detector)["Reshape"] - ops(cleaned)["Reshape"] == 8, removal.detail
    assert len(cleaned.graph.node) < len(detector.graph.node)
    assert "8 Reshape" in removal.detail
    assert_same_outputs(detector, cleaned, detector_feeds)


def test_noop_removal_when_resnet_has_identity_and_dropout_removes_both(resnet: onnx.ModelProto) -> None:
    cleaned = NoOpRemoval().apply(resnet)
    assert ops(cleaned)["Identity"] == 0 and ops(cleaned)["Dropout"] == 0
    assert len(cleaned.graph.node) == len(resnet.graph.node) - 2
    assert_same_outputs(resnet, cleaned, images(batch=2))


def test_noop_removal_when_noop_writes_a_graph_output_keeps_the_output_name() -> None:
    # given x -> Relu -> Identity -> y, where y is the graph output
    model = _model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Identity", ["r"], ["y"])], [2, 3, 4], {})
    # when
    cleaned = NoOpRemoval().apply(model)
    # then the Relu writes y itself
    assert [n.op_type for n in cleaned.graph.node] == ["Relu"]
    assert list(cleaned.graph.node[0].output) == ["y"]
    assert_same_outputs(model, cleaned, FEEDS)


def test_noop_removal_when_graph_input_is_passed_straight_out_keeps_the_identity() -> None:
    model = _model([helper.make_node("Identity", ["x"], ["y"])], [2, 3, 4], {})
    cleaned = NoOpRemoval().apply(model)
    assert ops(cleaned)["Identity"] == 1, "an output cannot be renamed onto the graph input"


def test_noop_removal_when_arithmetic_is_neutral_removes_it_and_keeps_real_arithmetic() -> None:
    # given Mul by 1, Add of 0, Div by 1, Sub of 0, then a Mul by 2 and an Add that broadcasts up
    f32 = np.float32
    nodes = [
        helper.make_node("Mul", ["one", "x"], ["a"]),
        helper.make_node("Add", ["a", "zero"], ["b"]),
        helper.make_node("Div", ["b", "one"], ["c"]),
        helper.make_node("Sub", ["c", "zero"], ["d"]),
        helper.make_node("Mul", ["d", "two"], ["e"]),
        helper.make_node("Add", ["e", "zeros_4d"], ["y"]),
    ]
    inits = {"one": f32(1.0), "zero": f32(0.0), "two": f32(2.0), "zeros_4d": np.zeros((1, 1, 1, 1), f32)}
    model = _model(nodes, [1, 2, 3, 4], {k: np.asarray(v, f32) for k, v in inits.items()})
    # when
    cleaned = NoOpRemoval().apply(model)
    # then
    assert [n.op_type for n in cleaned.graph.node] == ["Mul", "Add"], "Mul by 2 and the rank-raising Add stay"
    assert_same_outputs(model, cleaned, FEEDS)


def test_noop_removal_when_cast_transpose_and_squeeze_pair_change_nothing_removes_them() -> None:
    nodes = [
        helper.make_node("Cast", ["x"], ["a"], to=TensorProto.FLOAT),
        helper.make_node("Transpose", ["a"], ["b"], perm=[0, 1, 2]),
        helper.make_node("Unsqueeze", ["b", "axis0"], ["c"]),
        helper.make_node("Squeeze", ["c", "axis0"], ["d"]),
        helper.make_node("Unsqueeze", ["d", "axis0"], ["e"]),
        helper.make_node("Relu", ["e"], ["y"]),
    ]
    model = _model(nodes, [1, 2, 3, 4], {"axis0": np.array([0], np.int64)})
    cleaned = NoOpRemoval().apply(model)
    assert [n.op_type for n in cleaned.graph.node] == ["Unsqueeze", "Relu"]
    assert_same_outputs(model, cleaned, FEEDS)


def test_noop_removal_when_cast_changes_the_type_keeps_it() -> None:
    nodes = [
        helper.make_node("Cast", ["x"], ["h"], to=TensorProto.FLOAT16),
        helper.make_node("Cast", ["h"], ["y"], to=TensorProto.FLOAT),
    ]
    model = _model(nodes, [2, 3, 4], {})
    assert len(NoOpRemoval().apply(model).graph.node) == 2, "a float16 round trip rounds: not a no-op"


def test_noop_removal_when_a_loop_body_reads_the_removed_tensor_reroutes_the_body() -> None:
    # given an If whose branches read the output of an Identity from the enclosing graph
    then_branch = helper.make_graph(
        [helper.make_node("Neg", ["kept"], ["neg"])],
        "then",
        [],
        [helper.make_tensor_value_info("neg", TensorProto.FLOAT, [2, 3, 4])],
    )
    else_branch = helper.make_graph(
        [helper.make_node("Abs", ["kept"], ["abs"])],
        "else",
        [],
        [helper.make_tensor_value_info("abs", TensorProto.FLOAT, [2, 3, 4])],
    )
    nodes = [
        helper.make_node("Identity", ["x"], ["kept"]),
        helper.make_node("If", ["flag"], ["y"], then_branch=then_branch, else_branch=else_branch),
    ]
    model = _model(nodes, [2, 3, 4], {"flag": np.array(True)})
    # when
    cleaned = NoOpRemoval().apply(model)
    # then
    assert ops(cleaned)["Identity"] == 0
    onnx.checker.check_model(cleaned)
    assert_same_outputs(model, cleaned, FEEDS)
