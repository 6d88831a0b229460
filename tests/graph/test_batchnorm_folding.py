"""BatchNormalization folded into the preceding Conv, on the ResNet-shaped CNN and the shipped detector."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from edge_sdk.graph import BatchNormFolding, NoOpRemoval
from tools.harness import onnx_models

from .helpers import assert_same_outputs, images, ops


def test_batchnorm_folding_when_every_conv_feeds_a_batchnorm_folds_all_20(resnet: onnx.ModelProto) -> None:
    # given the ResNet-18 layout: 20 Conv -> BatchNormalization pairs
    assert ops(resnet)["BatchNormalization"] == 20
    # when
    folding = BatchNormFolding()
    folded = folding.apply(resnet)
    # then
    assert ops(folded)["BatchNormalization"] == 0, "every BatchNormalization should be gone"
    assert len(folded.graph.node) == len(resnet.graph.node) - 20
    assert folding.detail == "folded 20 BatchNormalization"
    assert_same_outputs(resnet, folded, images(batch=2))


def test_batchnorm_folding_when_run_leaves_the_given_model_untouched(resnet: onnx.ModelProto) -> None:
    before = resnet.SerializeToString()
    BatchNormFolding().apply(resnet)
    assert resnet.SerializeToString() == before, "a pass returns a new model"


def test_batchnorm_folding_when_detector_reshape_sits_between_runs_after_noop_removal(
    detector: onnx.ModelProto, detector_feeds: dict[str, np.ndarray]
) -> None:
    # given the detector's 4 BatchNormalizations, each behind a Reshape to the shape it already has
    alone = BatchNormFolding().apply(detector)
    assert ops(alone)["BatchNormalization"] == 4, "a Reshape between Conv and BN blocks folding"
    # when the no-op Reshapes go first
    folded = BatchNormFolding().apply(NoOpRemoval().apply(detector))
    # then
    assert ops(folded)["BatchNormalization"] == 0
    assert_same_outputs(detector, folded, detector_feeds)


def _conv_bn_graph(conv_output_is_also_read: bool, shared_weights: bool) -> onnx.ModelProto:
    rng = np.random.default_rng(3)

    def init(name: str, value: np.ndarray) -> onnx.TensorProto:
        return numpy_helper.from_array(value.astype(np.float32), name)

    inits = [init("w", rng.standard_normal((4, 3, 3, 3))), init("b", rng.standard_normal(4))]
    for name, low in (("gamma", 0.5), ("beta", -0.5), ("mean", -0.5), ("var", 0.5)):
        inits.append(init(name, rng.uniform(low, low + 1.0, 4)))
    bn_inputs = ["gamma", "beta", "mean", "var"]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["conv"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["conv", *bn_inputs], ["y"]),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])]
    if conv_output_is_also_read:
        nodes.append(helper.make_node("Relu", ["conv"], ["raw"]))
        outputs.append(helper.make_tensor_value_info("raw", TensorProto.FLOAT, [1, 4, 6, 6]))
    if shared_weights:  # a second Conv on the same weights, no BatchNormalization after it
        nodes.append(helper.make_node("Conv", ["x", "w"], ["plain"], pads=[1, 1, 1, 1]))
        outputs.append(helper.make_tensor_value_info("plain", TensorProto.FLOAT, [1, 4, 6, 6]))
    graph = helper.make_graph(
        nodes, "conv_bn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])], outputs, inits
    )
    return onnx_models.make_model(graph, 17)


def test_batchnorm_folding_when_conv_output_has_another_reader_leaves_it() -> None:
    model = _conv_bn_graph(conv_output_is_also_read=True, shared_weights=False)
    folded = BatchNormFolding().apply(model)
    assert ops(folded)["BatchNormalization"] == 1, "the un-normalised Conv output is still needed"


def test_batchnorm_folding_when_weights_are_shared_keeps_the_other_conv_exact() -> None:
    # given two Convs reading one weight tensor, only one followed by BatchNormalization
    model = _conv_bn_graph(conv_output_is_also_read=False, shared_weights=True)
    feeds = {"x": np.random.default_rng(4).standard_normal((1, 3, 6, 6)).astype(np.float32)}
    # when
    folded = BatchNormFolding().apply(model)
    # then the folded Conv got its own weights and the other Conv still reads the originals
    assert ops(folded)["BatchNormalization"] == 0
    assert {i.name for i in folded.graph.initializer} >= {"w"}
    assert_same_outputs(model, folded, feeds)
