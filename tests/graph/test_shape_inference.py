"""Shape inference pass: ONNX's inference with data propagation, stale annotations dropped."""

from __future__ import annotations

import logging

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from edge_sdk.graph import BatchSize, ShapeInference
from tools.harness import onnx_models

from .helpers import assert_same_outputs, images, run


def _shapes(model: onnx.ModelProto) -> dict[str, list[int | str]]:
    return {
        info.name: [d.dim_value if d.HasField("dim_value") else d.dim_param for d in info.type.tensor_type.shape.dim]
        for info in model.graph.value_info
    }


def test_shape_inference_when_run_on_resnet_types_every_intermediate_tensor(resnet: onnx.ModelProto) -> None:
    # when
    inference = ShapeInference()
    typed = inference.apply(resnet)
    # then every node output except the graph output has a type and shape
    intermediate = {out for node in typed.graph.node for out in node.output} - {"logits"}
    assert set(_shapes(typed)) == intermediate
    assert _shapes(typed)["stem.relu"] == ["N", 8, 112, 112]
    assert _shapes(typed)["flat"] == ["N", 64], "data propagation resolves the Concat-built flatten shape"
    assert inference.detail == f"{len(intermediate)} intermediate tensors typed"
    assert_same_outputs(resnet, typed, images(batch=1))


def test_shape_inference_when_batch_changed_replaces_stale_shapes(resnet: onnx.ModelProto) -> None:
    typed = ShapeInference().apply(resnet)
    retyped = ShapeInference().apply(BatchSize(2).apply(typed))
    assert _shapes(retyped)["stem.relu"] == [2, 8, 112, 112], "no stale 'N' left from the first inference"


def test_shape_inference_when_declared_output_contradicts_the_graph_warns_and_keeps_going(
    caplog: pytest.LogCaptureFixture,
) -> None:
    graph = helper.make_graph(
        [helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0])],
        "contradiction",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    model = onnx_models.make_model(graph, 17)
    # when
    with caplog.at_level(logging.WARNING, logger="edge_sdk.graph"):
        typed = ShapeInference().apply(model)
    # then: ONNX Runtime would still run it, so the build warns rather than fails
    assert any("shape inference" in r.getMessage() and "keeping" in r.getMessage() for r in caplog.records)
    feeds = {"x": np.arange(6, dtype=np.float32).reshape(2, 3)}
    assert run(typed, feeds)[0].shape == (3, 2)


def test_shape_inference_when_detector_has_loops_keeps_its_outputs(
    detector: onnx.ModelProto, detector_feeds: dict[str, np.ndarray]
) -> None:
    typed = ShapeInference().apply(detector)
    assert len(typed.graph.value_info) > 300
    assert_same_outputs(detector, typed, detector_feeds)
