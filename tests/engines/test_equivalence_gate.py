"""The equivalence gate every build ends with: what it records, a fold that fails it, an engine it refuses."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import yaml
from onnx import TensorProto, helper, numpy_helper

from edge_sdk.core.errors import ConfigError, EngineBuildError
from edge_sdk.core.model_file import ModelFile
from edge_sdk.engines import engine as engine_module
from edge_sdk.engines.cache import EngineCache
from edge_sdk.engines.engine import prepare_engine
from edge_sdk.graph.options import FRAME_INPUT
from edge_sdk.pipeline.config import load_pipeline
from edge_sdk.pipeline.engine_setup import pipeline_graph, prepare_models
from edge_sdk.pipeline.run import run_pipeline
from edge_sdk.profiles import DeviceProfile, ProfileCatalog

from ..conftest import REPO_ROOT

pytestmark = pytest.mark.slow  # multi-process runs or subprocesses: not in make test-fast

EDGE_SDK = str(Path(sys.executable).with_name("edge-sdk"))


def detector_pipeline(folder: Path, model: Path, video: Path, fold: bool = True) -> Path:
    path = folder / "pipeline.yaml"
    document = {
        "name": "door",
        "model": {"path": str(model)},
        "sources": [{"uri": str(video), "name": "door"}],
        "preprocess": {"resize": [300, 300], "layout": "nhwc", "dtype": "uint8", "color": "rgb", "fold": fold},
        "postprocess": {"type": "ssd", "labels": ["person"], "score_threshold": 0.5},
        "sinks": [{"type": "jsonl", "path": "out/results.jsonl"}],
        "runtime": {"mode": "inline"},
    }
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


def blank_the_folded_frame(model_path: Path) -> None:
    """Make the folded preprocessing see a black frame, as CUDA's uint8 Resize (interpolation weights
    truncated to 0) did: a graph that builds and runs, and answers wrongly."""
    model = onnx.load(str(model_path))
    graph = model.graph
    if FRAME_INPUT not in {value.name for value in graph.input}:
        return
    for node in graph.node:
        node.input[:] = ["blanked_frame" if name == FRAME_INPUT else name for name in node.input]
    graph.initializer.append(numpy_helper.from_array(np.zeros((1,), np.float32), "blank_zero"))
    graph.node.insert(0, helper.make_node("Cast", [FRAME_INPUT], ["frame_float"], to=TensorProto.FLOAT))
    graph.node.insert(1, helper.make_node("Mul", ["frame_float", "blank_zero"], ["blank_float"]))
    graph.node.insert(2, helper.make_node("Cast", ["blank_float"], ["blanked_frame"], to=TensorProto.UINT8))
    onnx.save(model, str(model_path))


def zero_the_first_convolution(model_path: Path) -> None:
    """A wrong engine whatever the preprocessing: the first Conv's weights are zero."""
    model = onnx.load(str(model_path))
    initializers = {init.name: init for init in model.graph.initializer}
    conv = next(node for node in model.graph.node if node.op_type == "Conv" and node.input[1] in initializers)
    weights = initializers[conv.input[1]]
    weights.CopyFrom(numpy_helper.from_array(np.zeros_like(numpy_helper.to_array(weights)), weights.name))
    onnx.save(model, str(model_path))


@pytest.fixture
def corrupt_graph(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Install a corruption of the graph the backend builds from (after the SDK's passes)."""

    def install(corrupt) -> None:  # type: ignore[no-untyped-def]
        real = engine_module._apply_graph_passes

        def corrupted(model, graph, destination):  # type: ignore[no-untyped-def]
            _graph_model, facts = real(model, graph, destination)
            corrupt(destination)
            return ModelFile.load(destination), facts

        monkeypatch.setattr(engine_module, "_apply_graph_passes", corrupted)

    return install


def test_build_records_the_gate_on_the_pipelines_frames_with_the_detection_metric(
    tmp_path: Path, demo_model: Path, small_video: Path, cpu_profile: DeviceProfile, engine_cache: EngineCache
) -> None:
    # given the detector in a pipeline reading a video, preprocessing folded
    config = load_pipeline(detector_pipeline(tmp_path, demo_model, small_video))
    # when its engine is prepared as a run prepares it
    models = prepare_models(config, cpu_profile, engine_cache)
    # then the engine is folded, and the gate ran on the video's frames, matching boxes
    gate = models.primary.gate
    assert models.primary.folded and gate is not None
    assert gate.passed and gate.task == "detection", gate.line()
    assert gate.origin == "4 frames of source door", "frames 0, 8 and 16 of the 24, and the last"
    assert gate.report["matched_boxes"] >= 0.95 and gate.report["reference_boxes"] > 0, gate.line()
    # and a second prepare takes the entry from the cache with its verdict, without running it again
    again = prepare_models(config, cpu_profile, engine_cache)
    assert not again.primary.built and again.primary.gate == gate


def test_a_fold_that_fails_the_gate_falls_back_to_host_preprocessing_with_one_warning(
    tmp_path: Path,
    demo_model: Path,
    small_video: Path,
    cpu_profile: DeviceProfile,
    engine_cache: EngineCache,
    corrupt_graph,  # type: ignore[no-untyped-def]
    caplog: pytest.LogCaptureFixture,
) -> None:
    # given a folded preprocessing that blanks the frame on this provider
    corrupt_graph(blank_the_folded_frame)
    config = load_pipeline(detector_pipeline(tmp_path, demo_model, small_video))
    # when the pipeline runs
    with caplog.at_level(logging.WARNING, logger="edge_sdk"):
        summary = run_pipeline(config, cpu_profile, engine_cache)
    # then the engine was rebuilt without the fold, with one warning naming the gate's failure
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "folded preprocessing fails the equivalence gate" in warnings[0], warnings
    assert "matched boxes" in warnings[0]
    (entry,) = engine_cache.entries()
    facts = entry.manifest["facts"]
    assert facts["equivalence"]["passed"] and "FAILED" in facts["equivalence"]["fold_fallback"]
    assert all(report["name"] != "preprocess_folding" for report in facts["graph_passes"])
    # and the run, preprocessing on the host, still finds the person in the frames
    rows = (tmp_path / "out" / "results.jsonl").read_text().splitlines()
    assert summary.frames == 24 and len(rows) == 24
    assert sum('"label": "person"' in row for row in rows) >= 20


def test_an_engine_that_does_not_match_the_model_is_refused_and_the_cache_keeps_what_it_had(
    tmp_path: Path,
    demo_model: Path,
    small_video: Path,
    cpu_profile: DeviceProfile,
    engine_cache: EngineCache,
    tiny_models: dict[str, Path],
    corrupt_graph,  # type: ignore[no-untyped-def]
) -> None:
    # given a cache holding one good engine
    prepare_engine(tiny_models["float_classifier"], cpu_profile, cache=engine_cache)
    before = {report.digest for report in engine_cache.entries()}
    # and a build whose graph is wrong folded or not
    corrupt_graph(zero_the_first_convolution)
    config = load_pipeline(detector_pipeline(tmp_path, demo_model, small_video))
    model = ModelFile.load(demo_model)
    # when it is built
    with pytest.raises(EngineBuildError) as refused:
        prepare_engine(model, cpu_profile, cache=engine_cache, graph=pipeline_graph(config, model))
    # then one line says it was refused and what the gate measured
    message = str(refused.value)
    assert "\n" not in message and "refused" in message and "equivalence gate FAILED" in message, message
    assert "matched boxes" in message
    # and the cache holds exactly what it held, with no build leftovers
    assert {report.digest for report in engine_cache.entries()} == before
    assert not engine_cache.not_entries()


def test_build_cli_prints_the_gate_and_cache_ls_shows_it(tmp_path: Path, demo_model: Path, small_video: Path) -> None:
    # given the demo-like pipeline
    pipeline = detector_pipeline(tmp_path, demo_model, small_video)
    env = {**os.environ, "EDGE_SDK_CACHE_DIR": str(tmp_path / "cache"), "COLUMNS": "200"}
    # when the engine is built through the CLI
    built = subprocess.run(
        [EDGE_SDK, "build", str(demo_model), "--profile", "x86-cpu", "--pipeline", str(pipeline)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    # then the gate's line is printed, and `cache ls` has it in its gate column
    assert built.returncode == 0, built.stderr
    assert "equivalence gate passed on 4 frames of source door (detection)" in built.stdout, built.stdout
    listed = subprocess.run([EDGE_SDK, "cache", "ls"], capture_output=True, text=True, env=env, timeout=60)
    assert listed.returncode == 0 and "passed boxes" in listed.stdout, listed.stdout


def test_without_a_pipeline_a_detector_is_judged_on_the_shipped_image_and_a_classifier_per_output(
    demo_model: Path, cpu_profile: DeviceProfile, engine_cache: EngineCache, tiny_models: dict[str, Path]
) -> None:
    # when each is built with no pipeline
    detector = prepare_engine(demo_model, cpu_profile, cache=engine_cache)
    classifier = prepare_engine(tiny_models["float_classifier"], cpu_profile, cache=engine_cache)
    # then the detector (TF Object Detection API outputs) is matched box by box on the shipped frames
    assert detector.gate is not None and detector.gate.task == "detection"
    assert detector.gate.origin == "8 frames of the shipped image"
    assert detector.gate.report["reference_boxes"] > 0 and detector.gate.report["matched_boxes"] == 1.0
    # and the classifier, which frames cannot feed without its preprocessing, on seeded inputs by cosine
    assert classifier.gate is not None and classifier.gate.task == "generic"
    assert "seeded random inputs" in classifier.gate.origin
    assert min(output["cosine"] for output in classifier.gate.report["outputs"]) > 0.9999


def test_a_profile_with_malformed_equivalence_settings_gets_one_clear_error(tmp_path: Path) -> None:
    # given a copy of the CPU profile whose gate tolerance is out of range
    document = yaml.safe_load((REPO_ROOT / "device_profiles" / "x86-cpu.yaml").read_text())
    document["equivalence"] = {"max_drop": 250}
    (tmp_path / "x86-cpu.yaml").write_text(yaml.safe_dump(document))
    # when it is loaded, then the error names the field and the bound
    with pytest.raises(ConfigError, match=r"equivalence.max_drop.*100"):
        ProfileCatalog(tmp_path).load("x86-cpu")


def test_build_of_a_split_detector_judges_the_engine_with_its_host_decoder_against_the_uncut_model(
    tmp_path: Path, demo_model: Path, small_video: Path, cpu_profile: DeviceProfile, engine_cache: EngineCache
) -> None:
    # given the detector cut after its box head (postprocess decode: sdk)
    path = detector_pipeline(tmp_path, demo_model, small_video)
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    document["postprocess"]["decode"] = "sdk"
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    # when its engine is prepared as a run prepares it
    models = prepare_models(load_pipeline(path), cpu_profile, engine_cache)
    # then the engine outputs the raw head, and the gate compared its decoded boxes with the uncut graph's
    gate = models.primary.gate
    built = ModelFile.load(models.primary.entry.directory / engine_module.GRAPH_DIR / demo_model.name)
    assert {meta.name for meta in built.outputs} == {"box_encodings", "class_scores"}, "the engine stops at the head"
    assert gate is not None and gate.passed and gate.task == "detection", gate.line()
    assert gate.report["matched_boxes"] == 1.0 and gate.report["reference_boxes"] > 0, gate.line()


@pytest.mark.parametrize(
    ("reference", "candidate", "matched", "passes"),
    [
        (8, 7, 7, True),
        (8, 6, 6, False),
        (11, 0, 0, False),
        (5, 1, 1, False),
        (200, 191, 191, True),
        (200, 180, 180, False),
    ],
    ids=["one-box-of-8", "two-boxes-of-8", "all-lost", "one-of-5-found", "4.5-percent", "10-percent"],
)
def test_the_gate_forgives_one_box_of_a_few_but_not_more(
    reference: int, candidate: int, matched: int, passes: bool
) -> None:
    # given a detector's report over a few frames (one box at the threshold falls either side)
    from edge_sdk.backends.int8.accuracy import AccuracyGate, AccuracyReport
    from edge_sdk.engines.equivalence import forgiving_one_box

    report = AccuracyReport(
        samples=8, outputs=(), matched_boxes=matched / reference, score_drift=0.0, reference_boxes=reference,
        candidate_boxes=candidate, matched_count=matched, extra_boxes=0, task="detection",
    )  # fmt: skip
    # when the profile's 5 points are applied, then one box of a few passes, two or a wrong engine do not
    failures = forgiving_one_box(AccuracyGate(5.0, 0.99), report).failures(report)
    assert (not failures) is passes, failures


def test_a_cached_start_does_not_touch_the_pipelines_source_for_the_gate(
    tmp_path: Path,
    demo_model: Path,
    small_video: Path,
    cpu_profile: DeviceProfile,
    engine_cache: EngineCache,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given a pipeline whose engine was built (the gate read its video then)
    from edge_sdk.pipeline import engine_setup

    made: list[str] = []
    real = engine_setup.create_source

    def counting(spec, base_dir, *args, **kwargs):  # type: ignore[no-untyped-def]
        made.append(spec.uri)
        return real(spec, base_dir, *args, **kwargs)

    monkeypatch.setattr(engine_setup, "create_source", counting)
    config = load_pipeline(detector_pipeline(tmp_path, demo_model, small_video))
    prepare_models(config, cpu_profile, engine_cache)
    assert made == [str(small_video)], "the build's gate read the source once"
    # when the pipeline starts again on the cached engine, then the gate makes no source at all
    made.clear()
    assert not prepare_models(config, cpu_profile, engine_cache).primary.built
    assert made == []
