"""Per-layer INT8 sensitivity, run for real with ONNX Runtime on a model with one layer INT8 breaks."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest

from edge_sdk.backends.calibration import Int8Settings, SampleSet, TaskSpec
from edge_sdk.backends.int8.sensitivity import (
    LayerSensitivity,
    SensitivityAnalysis,
    analyse_sensitivity,
    layer_sensitivity,
    rank_layers,
    standalone_nodes,
)
from edge_sdk.backends.int8.sensitivity_plot import plot_sensitivity
from edge_sdk.backends.onnxruntime.quantizer import OnnxRuntimeQuantizer
from edge_sdk.core.errors import ConfigError
from tests.conftest import REPO_ROOT

from .int8_models import HARMLESS_NODES, SENSITIVE_NODE, SPIKED_TENSOR, labelled_samples, outlier_cnn

QUANTIZER = OnnxRuntimeQuantizer()

CLASSIFICATION = TaskSpec(kind="classification")
DIGITS_MODEL = REPO_ROOT / "models" / "digits_cnn.onnx"
DIGITS_HOLDOUT = REPO_ROOT / "models" / "digits_holdout.npz"


@pytest.fixture(scope="module")
def outlier_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return outlier_cnn(tmp_path_factory.mktemp("int8") / "outlier_cnn.onnx")


@pytest.fixture(scope="module")
def outlier_samples(outlier_model: Path) -> SampleSet:
    samples, labels = labelled_samples(outlier_model)
    return SampleSet(tuple(samples), labels, "outlier samples")


@pytest.fixture(scope="module")
def analysis(outlier_model: Path, outlier_samples: SampleSet) -> SensitivityAnalysis:
    return analyse_sensitivity(outlier_model, outlier_samples, Int8Settings(), CLASSIFICATION, quantizer=QUANTIZER)


def test_analyse_sensitivity_when_one_layer_breaks_int8_ranks_it_first(analysis: SensitivityAnalysis) -> None:
    # given a model whose first convolution reads an input range stretched by outliers (see int8_models)
    # then that layer comes first with most of the accuracy gone, and the others cost nothing
    first, *rest = analysis.layers
    assert first.node == SENSITIVE_NODE, f"the layer INT8 breaks should rank first, got {analysis.layers}"
    assert first.metric_drop >= 50.0, f"quantising it alone should lose most of the accuracy, got {first}"
    assert first.metric == "accuracy drop (points)", "with labels the drop is in accuracy points"
    for layer in rest:
        assert layer.metric_drop == 0.0 and layer.cosine > 0.99, f"{layer.node} should be harmless: {layer}"


def test_analyse_sensitivity_when_model_has_pass_through_ops_ranks_each_compute_layer_once(
    analysis: SensitivityAnalysis,
) -> None:
    ranked = [layer.node for layer in analysis.layers]
    assert sorted(ranked) == sorted([SENSITIVE_NODE, *HARMLESS_NODES]), (
        "every layer that quantises on its own is ranked once; Clip/ReLU/Flatten only follow their neighbours"
    )


def test_analyse_sensitivity_when_run_measures_the_fully_quantised_model_and_checks_ranges(
    analysis: SensitivityAnalysis,
) -> None:
    assert analysis.full_int8_drop >= 50.0, "the whole model in INT8 carries the broken layer's loss"
    assert analysis.calibration_samples == 48 and analysis.held_out_samples == 16, "every 4th sample is held out"
    flagged = {(w.tensor, w.kind) for w in analysis.range_warnings}
    assert (SPIKED_TENSOR, "precision") in flagged, (
        f"the outlier-stretched input range should be reported, got {analysis.range_warnings}"
    )


def test_analyse_sensitivity_when_exported_as_dict_has_layers_and_warnings(analysis: SensitivityAnalysis) -> None:
    payload = analysis.to_dict()
    assert [layer["node"] for layer in payload["layers"]] == [layer.node for layer in analysis.layers]
    assert payload["range_warnings"] and payload["full_int8"]["metric_drop"] == pytest.approx(analysis.full_int8_drop)


def test_layer_sensitivity_when_data_has_no_labels_measures_top1_disagreement(
    outlier_model: Path, outlier_samples: SampleSet
) -> None:
    # when
    layers = layer_sensitivity(
        outlier_model, replace(outlier_samples, labels=None), Int8Settings(), CLASSIFICATION, quantizer=QUANTIZER
    )
    # then
    assert layers[0].node == SENSITIVE_NODE
    assert layers[0].metric == "top-1 disagreement (points)"
    assert layers[0].metric_drop >= 50.0


def test_layer_sensitivity_when_task_is_generic_ranks_by_cosine(
    outlier_model: Path, outlier_samples: SampleSet
) -> None:
    layers = layer_sensitivity(
        outlier_model, outlier_samples, Int8Settings(), TaskSpec(kind="generic"), quantizer=QUANTIZER
    )
    assert layers[0].node == SENSITIVE_NODE and layers[0].metric == "1 - cosine"
    assert layers[0].metric_drop > 0.5, f"the broken layer's outputs should be far from FP32: {layers[0]}"
    assert all(layer.metric_drop < 0.01 for layer in layers[1:]), layers


def test_rank_layers_when_a_node_name_is_unknown_raises_config_error(outlier_model: Path) -> None:
    held_out = [{"images": np.zeros((1, 3, 8, 8), np.float32)}]
    with pytest.raises(ConfigError, match="unknown names"):
        rank_layers(
            outlier_model,
            None,
            Int8Settings(),
            held_out,
            [{"logits": np.zeros((1, 4))}],
            CLASSIFICATION,  # type: ignore[arg-type]
            quantizer=QUANTIZER,
            nodes=["conv_z"],
        )


def test_analyse_sensitivity_when_too_few_samples_to_hold_out_raises_config_error(outlier_model: Path) -> None:
    one = SampleSet(({"images": np.zeros((1, 3, 8, 8), np.float32)},))
    with pytest.raises(ConfigError, match="at least 2 samples"):
        analyse_sensitivity(outlier_model, one, Int8Settings(), CLASSIFICATION, quantizer=QUANTIZER)


def test_standalone_nodes_when_model_has_relu_and_flatten_lists_only_compute_layers(outlier_model: Path) -> None:
    assert standalone_nodes(onnx.load(str(outlier_model)), QUANTIZER) == ["conv_a", "conv_b", "fc"]


def test_layer_sensitivity_when_shipped_digits_model_costs_each_layer_little() -> None:
    # given the shipped digits classifier and its labelled held-out digits
    if not DIGITS_MODEL.is_file():
        pytest.skip("models/digits_cnn.onnx is not built (tools/train_digits.py)")
    data = np.load(DIGITS_HOLDOUT)
    samples = SampleSet(tuple({"image": image[np.newaxis]} for image in data["image"][:120]), data["labels"][:120])
    # when
    layers = layer_sensitivity(DIGITS_MODEL, samples, Int8Settings(), CLASSIFICATION, quantizer=QUANTIZER)
    # then every convolution and the classifier are ranked, none costing more than a point alone
    assert {layer.op_type for layer in layers} >= {"Conv", "Gemm"}
    assert all(layer.metric_drop <= 1.0 for layer in layers), layers


def test_plot_sensitivity_when_given_layers_writes_a_png(analysis: SensitivityAnalysis, tmp_path: Path) -> None:
    path = plot_sensitivity(analysis.layers, tmp_path / "plots" / "sensitivity.png", title="outlier_cnn")
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n"), "the plot should be a PNG file"
    assert len(data) > 5_000, f"a bar chart with labels should not be tiny, got {len(data)} bytes"


def test_plot_sensitivity_when_no_layers_raises_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="at least one layer"):
        plot_sensitivity([], tmp_path / "empty.png")


def test_plot_sensitivity_when_no_layer_loses_a_box_plots_the_score_drift(tmp_path: Path) -> None:
    # given detection results where every drop is 0 (common on a few frames): the score drift separates them
    layers = [
        LayerSensitivity(f"conv_{i}", "Conv", 0.0, 0.9, "unmatched boxes (points)", score_drift=0.03 / (i + 1))
        for i in range(5)
    ]
    # when
    path = plot_sensitivity(layers, tmp_path / "detector.png")
    # then
    assert path.read_bytes().startswith(b"\x89PNG"), "a plot is still written"
