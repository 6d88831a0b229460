"""Models the SDK writes keep the input's IR version: onnx stamps its newest IR on models it builds (14
from onnx 1.23), newer than an older ONNX Runtime reads (onnxruntime-gpu 1.31 reads up to 13)."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import helper

from edge_sdk.backends.calibration import Int8Settings, SampleSet
from edge_sdk.backends.onnxruntime.builder import OPTIMIZED_MODEL
from edge_sdk.backends.onnxruntime.quantize import calibrate, prepare_for_quantization, quantize_with_ranges
from edge_sdk.core.host import HostFacts
from edge_sdk.core.preprocess import PreprocessSpec
from edge_sdk.engines.cache import EngineCache
from edge_sdk.engines.engine import GRAPH_DIR, prepare_engine
from edge_sdk.graph import GraphOptions, optimize_graph
from edge_sdk.graph import optimize as optimize_module
from edge_sdk.graph.graph_edit import keep_ir_version
from edge_sdk.profiles import DeviceProfile
from tools.harness import onnx_models

from ..backends.int8_models import labelled_samples, outlier_cnn

INPUT_IR = 10
SPEC = PreprocessSpec(resize=(8, 8), layout="nchw", dtype="float32", scale=1 / 255)


def _restamped(path: Path, ir_version: int = INPUT_IR, opset: int | None = None) -> Path:
    """The model at `path` rewritten with another IR version (and main opset, ops permitting)."""
    model = onnx.load(str(path))
    model.ir_version = ir_version
    if opset is not None:
        next(o for o in model.opset_import if o.domain in ("", "ai.onnx")).version = opset
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def _ir(path: Path) -> int:
    return onnx.load(str(path), load_external_data=False).ir_version


@pytest.fixture
def classifier_ir10(tmp_path: Path) -> Path:
    """The float classifier at IR 10 and opset 11: folding preprocessing upgrades it to opset 13 first."""
    return _restamped(onnx_models.float_classifier(tmp_path / "classifier.onnx", batch=1), opset=11)


def test_keep_ir_version_when_the_result_is_newer_lowers_it_to_the_source_but_not_below_its_opsets() -> None:
    graph = helper.make_graph([], "empty", [], [])
    stamped = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])  # onnx's newest IR
    assert keep_ir_version(onnx.ModelProto(ir_version=INPUT_IR), stamped).ir_version == INPUT_IR
    older = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    older.ir_version = 8
    assert keep_ir_version(onnx.ModelProto(ir_version=INPUT_IR), older).ir_version == 8, "never raised"
    opset21 = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    assert keep_ir_version(onnx.ModelProto(ir_version=7), opset21).ir_version == 10, "opset 21 needs IR 10"


def test_optimize_graph_when_a_pass_stamps_onnx_newest_ir_keeps_the_input_ir(
    classifier_ir10: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a pass that rebuilds the model with helper.make_model (onnx stamps its own IR version)
    class Rebuild:
        name = "rebuild"

        def apply(self, model: onnx.ModelProto) -> onnx.ModelProto:
            return helper.make_model(model.graph, opset_imports=model.opset_import)

    passes = optimize_module.graph_passes
    monkeypatch.setattr(optimize_module, "graph_passes", lambda model, options: [*passes(model, options), Rebuild()])
    # when the passes run on the IR 10 model (preprocess folded, opset upgraded)
    optimized, reports = optimize_graph(onnx.load(str(classifier_ir10)), GraphOptions(preprocess=SPEC))
    # then
    assert reports[-1].name == "rebuild"
    assert optimized.ir_version == INPUT_IR, f"the passes' model must keep IR {INPUT_IR}, got {optimized.ir_version}"


def test_prepare_engine_when_model_is_ir_10_writes_graph_and_engine_at_no_newer_ir(
    classifier_ir10: Path, cpu_profile: DeviceProfile, engine_cache: EngineCache, host_facts: HostFacts
) -> None:
    # when an engine with folded preprocessing is built from the IR 10 model
    engine = prepare_engine(
        classifier_ir10, cpu_profile, cache=engine_cache, facts=host_facts, graph=GraphOptions(preprocess=SPEC)
    )
    # then the graph the passes wrote and the model ONNX Runtime optimised are no newer than IR 10
    written = {
        "graph passes": engine.entry.directory / GRAPH_DIR / classifier_ir10.name,
        "optimised": engine.entry.directory / OPTIMIZED_MODEL,
    }
    for what, path in written.items():
        assert path.is_file(), f"the {what} model must be in the cache entry"
        assert _ir(path) <= INPUT_IR, f"the {what} model must not be newer than IR {INPUT_IR}, got {_ir(path)}"


def test_int8_quantization_when_model_is_ir_10_writes_prepared_and_quantized_models_at_no_newer_ir(
    tmp_path: Path,
) -> None:
    # given the INT8 test CNN at IR 10 and its calibration ranges
    model = _restamped(outlier_cnn(tmp_path / "outlier_cnn.onnx"))
    samples, labels = labelled_samples(model, count=16)
    settings = Int8Settings()
    calibration, _ = SampleSet(tuple(samples), labels).split(settings.holdout_every)
    # when it is prepared and quantised
    prepared = prepare_for_quantization(model, tmp_path / "prepared.onnx")
    quantized = quantize_with_ranges(prepared, calibrate(prepared, calibration, settings), settings)
    # then
    assert _ir(prepared) <= INPUT_IR, f"the prepared model must not be newer than IR {INPUT_IR}"
    assert quantized.ir_version <= INPUT_IR, f"the QDQ model must not be newer than IR {INPUT_IR}"
    assert any(node.op_type == "QuantizeLinear" for node in quantized.graph.node), "it must be quantised"
