"""Mixed precision: the most sensitive layers stay float until the accuracy gate passes (real ONNX Runtime)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from edge_sdk.backends.calibration import Int8Settings, SampleSet, TaskSpec
from edge_sdk.backends.int8 import mixed_precision
from edge_sdk.backends.int8.accuracy import AccuracyGate, AccuracyReport, run_samples
from edge_sdk.backends.int8.mixed_precision import MixedPrecisionStopped, search_mixed_precision
from edge_sdk.backends.int8.sensitivity import LayerSensitivity, evaluate_model
from edge_sdk.backends.onnxruntime.quantize import TensorRanges, calibrate, prepare_for_quantization
from edge_sdk.backends.onnxruntime.quantizer import OnnxRuntimeQuantizer
from edge_sdk.core.errors import EngineBuildError

from .int8_models import SENSITIVE_NODE, labelled_samples, outlier_cnn

QUANTIZER = OnnxRuntimeQuantizer()

SETTINGS = Int8Settings()
TASK = TaskSpec(kind="classification")
GATE = AccuracyGate(max_accuracy_drop=1.0, min_cosine=0.99)


@dataclass(frozen=True)
class Setup:
    model: Path
    ranges: TensorRanges
    held_out: SampleSet
    reference: list[dict[str, np.ndarray]]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Setup:
    folder = tmp_path_factory.mktemp("mixed")
    model = outlier_cnn(folder / "outlier_cnn.onnx")
    samples, labels = labelled_samples(model)
    calibration, held_out = SampleSet(tuple(samples), labels).split(SETTINGS.holdout_every)
    prepared = prepare_for_quantization(model, folder / "outlier_cnn.prepared.onnx")
    ranges = calibrate(prepared, calibration, SETTINGS)
    return Setup(prepared, ranges, held_out, run_samples(QUANTIZER.session(model), held_out))


def _search(setup: Setup, gate: object = GATE, ranking: list[LayerSensitivity] | None = None):  # type: ignore[no-untyped-def]
    return search_mixed_precision(
        setup.model,
        setup.ranges,
        SETTINGS,
        setup.held_out,
        setup.reference,
        TASK,
        setup.held_out.labels,
        gate,  # type: ignore[arg-type]
        quantizer=QUANTIZER,
        ranking=ranking,
    )


def _layer(node: str) -> LayerSensitivity:
    return LayerSensitivity(node, "Conv", 0.0, 1.0, "accuracy drop (points)")


def test_search_mixed_precision_when_one_layer_breaks_int8_keeps_only_that_layer_in_float(setup: Setup) -> None:
    # when
    result = _search(setup)
    # then
    assert result.excluded_nodes == (SENSITIVE_NODE,), f"only the broken layer should stay float: {result.steps}"
    assert GATE.failures(result.report) == [], f"the result must pass the gate: {result.report.summary()}"
    assert result.report.candidate_accuracy == pytest.approx(result.report.reference_accuracy)
    quantized = {node.name for node in result.model.graph.node if node.op_type == "QuantizeLinear"}
    assert quantized, "the other layers must still run in INT8"
    first_conv = next(node for node in result.model.graph.node if node.name == SENSITIVE_NODE)
    assert first_conv.input[0] == "images", "the excluded layer reads the float input directly"


def test_search_mixed_precision_when_result_is_measured_again_gives_the_same_report(setup: Setup) -> None:
    result = _search(setup)
    again = evaluate_model(result.model, list(setup.held_out), setup.reference, TASK, setup.held_out.labels, QUANTIZER)
    assert again == result.report, "the returned model is the one the returned report measured"


def test_search_mixed_precision_when_culprit_ranks_fourth_grows_then_bisects(setup: Setup) -> None:
    # given a ranking that puts the broken layer 4th (behind harmless and pass-through layers)
    ranking = [_layer(n) for n in ("fc", "conv_b", "clip_a", SENSITIVE_NODE, "relu_b")]
    # when
    result = _search(setup, ranking=ranking)
    # then it checked that all 5 in float pass, tried 1, 2, 4, then 3 between the last failure and the first pass
    assert [step.excluded for step in result.steps] == [5, 1, 2, 4, 3]
    assert [not step.failures for step in result.steps] == [True, False, False, True, False]
    assert result.excluded_nodes == ("fc", "conv_b", "clip_a", SENSITIVE_NODE)


class _NeverPasses:
    def failures(self, report: AccuracyReport) -> list[str]:
        return ["cosine below an impossible bar"]


def test_search_mixed_precision_when_even_all_float_fails_stops_after_one_round_without_ranking(
    setup: Setup,
) -> None:
    with pytest.raises(
        MixedPrecisionStopped, match=r"even with all 3 quantisable layers in float.*impossible bar"
    ) as info:
        _search(setup, gate=_NeverPasses())
    assert [step.excluded for step in info.value.steps] == [3], "one round, no ranking, no doubling"
    assert "the layers were not ranked" in info.value.reason and "\n" not in info.value.reason
    assert isinstance(info.value, EngineBuildError)


def test_search_mixed_precision_when_more_float_layers_stop_helping_stops_and_says_so(setup: Setup) -> None:
    # given a ranking whose top 4 are harmless (the broken layer ranks 5th): keeping 1, 2, 4 of them in
    # float changes nothing
    ranking = [_layer(n) for n in ("fc", "conv_b", "clip_a", "relu_b", SENSITIVE_NODE)]
    with pytest.raises(MixedPrecisionStopped) as info:
        _search(setup, ranking=ranking)
    # then it stops after two doublings without a better metric, before trying more
    assert [step.excluded for step in info.value.steps] == [5, 1, 2, 4]
    assert info.value.reason.startswith("keeping 4 layers in float did not improve the accuracy drop (points)")
    assert "more layers in float are not helping" in info.value.reason


def test_search_mixed_precision_when_only_all_layers_in_float_pass_refuses_the_fp32_model(setup: Setup) -> None:
    ranking = [_layer(n) for n in ("fc", "conv_b", SENSITIVE_NODE)]
    with pytest.raises(MixedPrecisionStopped, match=r"passes only with all 3 quantisable layers in float") as info:
        _search(setup, ranking=ranking)
    assert [step.excluded for step in info.value.steps] == [3, 1, 2]


def test_search_mixed_precision_when_the_culprit_ranks_past_the_last_doubling_bisects_below_all_in_float(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given six ranked layers with the broken one 5th, and no plateau stop (a real ranking's doublings
    # improve the metric): 1, 2 and 4 in float fail, and the next doubling (8) is past the six
    monkeypatch.setattr(mixed_precision, "PATIENCE", 10)
    ranking = [_layer(n) for n in ("fc", "conv_b", "clip_a", "relu_b", SENSITIVE_NODE, "pool")]
    # when
    result = _search(setup, ranking=ranking)
    # then it bisects between 4 (failed) and all six (passed) and keeps five, not the FP32 model
    assert [step.excluded for step in result.steps] == [6, 1, 2, 4, 5]
    assert result.excluded_nodes == ("fc", "conv_b", "clip_a", "relu_b", SENSITIVE_NODE)


def test_search_mixed_precision_when_to_dict_lists_what_stayed_float(setup: Setup) -> None:
    payload = _search(setup).to_dict()
    assert payload["excluded_nodes"] == [SENSITIVE_NODE]
    assert payload["steps"] == [
        {"excluded": 3, "passed": True, "failures": []},
        {"excluded": 1, "passed": True, "failures": []},
    ]
    assert payload["most_sensitive"][0]["node"] == SENSITIVE_NODE


def test_rank_layers_when_first_node_does_not_quantise_alone_ranks_it_harmless(setup: Setup) -> None:
    # given a ranking request that starts with a pass-through node (a ReLU reading float data)
    from edge_sdk.backends.int8.sensitivity import rank_layers

    # when the layers are ranked
    layers = rank_layers(
        setup.model,
        setup.ranges,
        SETTINGS,
        setup.held_out.samples,
        setup.reference,
        TASK,
        setup.held_out.labels,
        quantizer=QUANTIZER,
        nodes=["relu_b", SENSITIVE_NODE],
    )

    # then the ReLU is ranked as costing nothing (it once crashed the detector's mixed-precision search)
    by_node = {layer.node: layer for layer in layers}
    assert by_node["relu_b"].metric_drop == 0.0, "a node that stays float alone costs nothing"
    assert layers[0].node == SENSITIVE_NODE, "the broken layer still ranks first"
