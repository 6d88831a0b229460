"""optimize_graph: the passes of an engine build in order, outputs unchanged; GraphOptions fingerprints."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from edge_sdk.core.errors import ConfigError, ModelError
from edge_sdk.core.preprocess import PreprocessSpec
from edge_sdk.graph import GraphOptions, optimize_graph

from .helpers import assert_same_outputs, images, ops, run

DEFAULT_PASSES = ["shape_inference", "constant_folding", "noop_removal", "batchnorm_folding", "shape_inference"]


def test_optimize_graph_when_run_on_resnet_drops_a_third_of_the_nodes_and_keeps_outputs(
    resnet: onnx.ModelProto,
) -> None:
    # when
    optimized, reports = optimize_graph(resnet, GraphOptions())
    # then
    assert [r.name for r in reports] == DEFAULT_PASSES
    assert reports[0].nodes_before == len(resnet.graph.node) == 75
    assert reports[-1].nodes_after == len(optimized.graph.node) == 49
    assert set(ops(optimized)) == {"Conv", "Relu", "Add", "MaxPool", "GlobalAveragePool", "Reshape", "Gemm"}
    assert_same_outputs(resnet, optimized, images(batch=2))


def test_optimize_graph_when_run_on_detector_finds_the_same_person(
    detector: onnx.ModelProto, detector_feeds: dict[str, np.ndarray]
) -> None:
    optimized, reports = optimize_graph(detector, GraphOptions())
    assert reports[-1].nodes_after < reports[0].nodes_before
    assert ops(optimized)["BatchNormalization"] == 0
    assert_same_outputs(detector, optimized, detector_feeds)
    scores = run(optimized, detector_feeds)[2]
    assert scores[0, 0] > 0.9, "the astronaut is still found with a high score"


def test_optimize_graph_when_batch_is_fixed_ends_with_batch_size_then_shape_inference(
    resnet: onnx.ModelProto,
) -> None:
    optimized, reports = optimize_graph(resnet, GraphOptions(batch=2))
    assert [r.name for r in reports][-2:] == ["batch_size", "shape_inference"]
    assert optimized.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 2
    assert_same_outputs(resnet, optimized, images(batch=2))


def test_optimize_graph_when_preprocess_given_folds_it_first_and_takes_raw_frames(
    resnet: onnx.ModelProto,
) -> None:
    # given ImageNet-style preprocessing for the 224x224 float NCHW model
    spec = PreprocessSpec(
        resize=(224, 224),
        layout="nchw",
        dtype="float32",
        scale=1 / 255,
        mean=(0.485, 0.456, 0.406),
        std=(0.229, 0.224, 0.225),
    )
    # when
    optimized, reports = optimize_graph(resnet, GraphOptions(preprocess=spec))
    # then the model takes raw uint8 frames, and the other passes still run after
    assert reports[0].name == "preprocess_folding"
    assert [r.name for r in reports[1:]] == DEFAULT_PASSES
    frame_input = optimized.graph.input[0]
    assert frame_input.type.tensor_type.elem_type == onnx.TensorProto.UINT8
    assert ops(optimized)["BatchNormalization"] == 0


def test_optimize_graph_when_input_name_is_unknown_raises_config_error(resnet: onnx.ModelProto) -> None:
    with pytest.raises(ConfigError, match="the model has no input 'pixels'; it has \\['images'\\]"):
        optimize_graph(resnet, GraphOptions(preprocess=PreprocessSpec(), input_name="pixels"))


def test_optimize_graph_when_graph_is_empty_raises_model_error() -> None:
    with pytest.raises(ModelError, match="at least one node"):
        optimize_graph(onnx.ModelProto(), GraphOptions())


def test_graph_options_fingerprint_when_options_are_equal_is_equal_and_otherwise_differs() -> None:
    spec = PreprocessSpec(resize=(300, 300))
    same = GraphOptions(preprocess=spec, batch=1).fingerprint()
    assert same == GraphOptions(preprocess=PreprocessSpec(resize=(300, 300)), batch=1).fingerprint()
    others = {
        GraphOptions().fingerprint(),
        GraphOptions(batch=None).fingerprint(),
        GraphOptions(batch=2).fingerprint(),
        GraphOptions(input_name="images").fingerprint(),
        GraphOptions(preprocess=PreprocessSpec(resize=(320, 320)), batch=1).fingerprint(),
        same,
    }
    assert len(others) == 6, "every option takes part in the fingerprint"
    assert len(same) == 64


@pytest.mark.parametrize("bad", [0, -2, "dynamic", True])
def test_graph_options_when_batch_is_invalid_raises_config_error(bad: object) -> None:
    with pytest.raises(ConfigError, match="expected a positive integer, None"):
        GraphOptions(batch=bad)  # type: ignore[arg-type]


def test_optimize_graph_when_preprocess_says_fold_false_leaves_the_input_alone(resnet: onnx.ModelProto) -> None:
    spec = PreprocessSpec(resize=(224, 224), layout="nchw", dtype="float32", fold=False)
    optimized, reports = optimize_graph(resnet, GraphOptions(preprocess=spec))
    assert [r.name for r in reports] == DEFAULT_PASSES
    assert optimized.graph.input[0].name == "images"
