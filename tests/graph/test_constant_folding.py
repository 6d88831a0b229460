"""Constant folding with onnxscript's optimizer and with the onnx.reference fallback."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edge_sdk.graph import ConstantFolding, constant_folding
from tools.harness import onnx_models

from .helpers import assert_same_outputs, images, ops

ENGINES = [
    pytest.param(
        "onnxscript",
        marks=pytest.mark.skipif(not constant_folding.onnxscript_available(), reason="onnxscript is not installed"),
    ),
    "reference",
]


@pytest.mark.parametrize("engine", ENGINES)
def test_constant_folding_when_resnet_builds_weights_and_shapes_from_constants_folds_them(
    resnet: onnx.ModelProto, engine: str
) -> None:
    # given the exporter leftovers: 2 Constant nodes, a Concat of them, a Transpose of the FC weight
    assert ops(resnet)["Constant"] == 2 and ops(resnet)["Transpose"] == 1
    # when
    folding = ConstantFolding(engine)
    folded = folding.apply(resnet)
    # then
    for op in ("Constant", "Concat", "Transpose"):
        assert ops(folded)[op] == 0, f"{op} should be folded into an initializer"
    assert len(folded.graph.node) <= len(resnet.graph.node) - 4
    assert folding.detail.startswith("folded ")
    assert_same_outputs(resnet, folded, images(batch=2))


@pytest.mark.parametrize("engine", ENGINES)
def test_constant_folding_when_detector_has_nothing_left_to_fold_keeps_its_outputs(
    detector: onnx.ModelProto, detector_feeds: dict[str, np.ndarray], engine: str
) -> None:
    folded = ConstantFolding(engine).apply(detector)
    assert len(folded.graph.node) <= len(detector.graph.node)
    assert_same_outputs(detector, folded, detector_feeds)


def _shape_arithmetic_model() -> onnx.ModelProto:
    """x [1, 3, 4, 4] -> Reshape(x, Concat(Shape(x)[0:1], [-1])) -> MatMul by a transposed weight -> y [1, 64]."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"], end=1),
        helper.make_node("Concat", ["shape", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"]),
        helper.make_node("Transpose", ["big"], ["big_t"], perm=[1, 0]),
        helper.make_node("MatMul", ["flat", "big_t"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "shape_arithmetic",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
        [
            numpy_helper.from_array(np.array([-1], np.int64), "minus_one"),
            numpy_helper.from_array(np.random.default_rng(6).standard_normal((64, 48)).astype(np.float32), "big"),
        ],
    )
    return onnx_models.make_model(graph, 17)


@pytest.mark.parametrize("engine", ENGINES)
def test_constant_folding_when_input_shape_is_static_folds_the_shape_subgraph(engine: str) -> None:
    model = _shape_arithmetic_model()
    folded = ConstantFolding(engine).apply(model)
    assert [n.op_type for n in folded.graph.node] == ["Reshape", "MatMul"]
    feeds = {"x": np.random.default_rng(7).standard_normal((1, 3, 4, 4)).astype(np.float32)}
    assert_same_outputs(model, folded, feeds)


@pytest.mark.parametrize("engine", ENGINES)
def test_constant_folding_when_the_result_is_over_the_size_limit_leaves_it(engine: str) -> None:
    # given a 48-element row tiled into a 64x48 constant, which folding would store in full
    nodes = [
        helper.make_node("Tile", ["row", "repeats"], ["tiled"]),
        helper.make_node("Add", ["x", "tiled"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "tile",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 48])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 48])],
        [
            numpy_helper.from_array(np.arange(48, dtype=np.float32).reshape(1, 48), "row"),
            numpy_helper.from_array(np.array([64, 1], np.int64), "repeats"),
        ],
    )
    model = onnx_models.make_model(graph, 17)
    # when the limit is below 64x48
    small = ConstantFolding(engine, max_elements=1000).apply(model)
    large = ConstantFolding(engine).apply(model)
    # then
    assert ops(small)["Tile"] == 1, "a 3,072-element result is over a 1,000-element limit"
    assert ops(large)["Tile"] == 0, "within the default limit it folds"


def test_constant_folding_when_engine_is_unknown_raises() -> None:
    with pytest.raises(ValueError, match="expected auto, onnxscript or reference"):
        ConstantFolding("tvm")


def test_constant_folding_when_onnxscript_is_not_installed_falls_back_to_onnx_reference(
    resnet: onnx.ModelProto, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a host without onnxscript (it is optional)
    monkeypatch.setattr(constant_folding, "onnxscript_available", lambda: False)
    # when
    folding = ConstantFolding()
    folded = folding.apply(resnet)
    # then
    assert folding.detail.endswith("(onnx.reference)")
    assert ops(folded)["Transpose"] == 0
