"""The default INT8 recipe: a detector's stem and post-processing stay float, anything else is quantised whole."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from edge_sdk.backends.calibration import Int8Settings, TaskSpec
from edge_sdk.backends.int8.recipe import default_float_nodes, stem_nodes, tail_nodes
from edge_sdk.postprocess.ssd import SsdSpec

DETECTION = TaskSpec(kind="detection", postprocess=SsdSpec(type="ssd"))


def _detector_like() -> onnx.ModelProto:
    """Eight convolutions, then a head: a reshape and a sigmoid (scores) and a mul (box decoding) per branch."""
    weight = numpy_helper.from_array(np.ones((2, 2, 1, 1), np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["x" if i == 0 else f"c{i - 1}", "w"], [f"c{i}"], name=f"conv{i}") for i in range(8)
    ]
    nodes += [
        helper.make_node("Relu", ["c0"], ["r0"], name="relu0"),
        helper.make_node("Reshape", ["c7", "shape"], ["flat"], name="reshape"),
        helper.make_node("Sigmoid", ["flat"], ["scores"], name="sigmoid"),
        helper.make_node("Mul", ["flat", "scale"], ["boxes"], name="decode"),
    ]
    graph = helper.make_graph(
        nodes,
        "detector_like",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
        [
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("boxes", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("r0", TensorProto.FLOAT, None),
        ],
        [
            weight,
            numpy_helper.from_array(np.array([1, -1], np.int64), "shape"),
            numpy_helper.from_array(np.array(2.0, np.float32), "scale"),
        ],
    )
    return helper.make_model(graph)


def test_recipe_for_a_detector_keeps_the_first_six_convolutions_and_what_follows_the_last_one_in_float() -> None:
    model = _detector_like()
    stem = [f"conv{i}" for i in range(6)]
    assert stem_nodes(model) == stem
    assert tail_nodes(model) == ["relu0", "reshape", "sigmoid", "decode"], "every node with no convolution after it"
    assert default_float_nodes(model, Int8Settings(), DETECTION) == [*stem, "relu0", "reshape", "sigmoid", "decode"]


def test_recipe_for_a_classifier_or_when_turned_off_keeps_nothing_in_float() -> None:
    model = _detector_like()
    assert default_float_nodes(model, Int8Settings(), TaskSpec(kind="classification")) == []
    assert default_float_nodes(model, Int8Settings(keep_float="none"), DETECTION) == []
