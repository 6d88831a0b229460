"""Comparing two engines on the same inputs: spec parsing, reference vs built vs cached engines, folding."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from edge_sdk.backends.calibration import Int8Settings, make_calibration
from edge_sdk.backends.int8.accuracy import AccuracyReport, OutputDrift
from edge_sdk.core.errors import ConfigError, ModelError
from edge_sdk.engines.cache import EngineCache
from edge_sdk.engines.compare import CompareSetup, EngineComparison, EngineSpec, compare_engines, parse_engine_spec
from edge_sdk.pipeline.config import load_pipeline
from edge_sdk.profiles import ProfileCatalog
from tests.conftest import REPO_ROOT

from ..backends.int8_models import labelled_samples, outlier_cnn, save_npz

DIGITS_MODEL = REPO_ROOT / "models" / "digits_cnn.onnx"
DIGITS_CALIBRATION = REPO_ROOT / "models" / "digits_calibration.npz"
DIGITS_HOLDOUT = REPO_ROOT / "models" / "digits_holdout.npz"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("m.onnx", EngineSpec("m.onnx", model=Path("m.onnx"))),
        ("m.onnx@x86-cpu", EngineSpec("m.onnx@x86-cpu", model=Path("m.onnx"), profile="x86-cpu")),
        (
            "dir/m.onnx@x86-cpu:int8",
            EngineSpec("dir/m.onnx@x86-cpu:int8", model=Path("dir/m.onnx"), profile="x86-cpu", precision="int8"),
        ),
        ("m.onnx:fp32", EngineSpec("m.onnx:fp32", model=Path("m.onnx"), precision="fp32")),
        ("3fa9c2d1", EngineSpec("3fa9c2d1", digest="3fa9c2d1")),
    ],
)
def test_parse_engine_spec_when_well_formed_names_model_profile_precision_or_digest(
    text: str, expected: EngineSpec
) -> None:
    assert parse_engine_spec(text) == expected


def test_parse_engine_spec_when_only_a_model_is_the_unoptimised_reference() -> None:
    assert parse_engine_spec("m.onnx").is_reference
    assert not parse_engine_spec("m.onnx@x86-cpu").is_reference


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "got an empty string"),
        ("m.onnx@", "expected a profile name after '@'"),
        ("m.onnx@x86-cpu:int4", "expected a precision in fp32, fp16, int8, got 'int4'"),
        ("m.onnx:int4", "got 'int4'"),
        ("model.tflite", "neither an .onnx path nor a digest"),
    ],
)
def test_parse_engine_spec_when_malformed_says_what_was_expected(text: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match="expected") as raised:
        parse_engine_spec(text)
    assert fragment in str(raised.value)


@pytest.fixture(scope="module")
def outlier(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The outlier CNN and an .npz of labelled samples for it."""
    folder = tmp_path_factory.mktemp("compare")
    model = outlier_cnn(folder / "outlier_cnn.onnx")
    samples, labels = labelled_samples(model, count=16)
    return model, save_npz(folder / "samples.npz", samples, labels)


@pytest.fixture
def setup(catalog: ProfileCatalog, engine_cache: EngineCache) -> CompareSetup:
    return CompareSetup(catalog=catalog, cache=engine_cache)


def test_compare_engines_when_reference_vs_fp32_engine_outputs_agree(
    outlier: tuple[Path, Path], setup: CompareSetup
) -> None:
    model, data = outlier
    # when
    result = compare_engines(parse_engine_spec(str(model)), parse_engine_spec(f"{model}@x86-cpu:fp32"), data, setup)
    # then
    assert result.samples == 16
    [drift] = result.report.outputs
    assert drift.name == "logits" and drift.cosine > 0.99999 and drift.max_abs_error < 1e-3
    assert result.report.task == "classification", "labelled data makes it a classification comparison"
    assert result.report.candidate_accuracy == result.report.reference_accuracy == 1.0
    assert result.failures(0.999) == [], "an FP32 engine must pass a tight cosine check"
    assert "x86-cpu:fp32" in result.b and "reference" in result.a
    json.dumps(result.to_dict())  # serialisable for --json


def test_compare_engines_when_int8_engine_then_its_digest_both_measure_the_same_drift(
    setup: CompareSetup, engine_cache: EngineCache
) -> None:
    # given the shipped digits classifier, an int8 spec and the calibration to build it
    if not DIGITS_MODEL.is_file():
        pytest.skip("models/digits_cnn.onnx is not built (tools/train_digits.py)")
    setup = CompareSetup(
        catalog=setup.catalog,
        cache=engine_cache,
        limit=80,
        calibration=lambda model, profile: make_calibration(
            DIGITS_CALIBRATION, model, profile.int8 or Int8Settings(), None
        ),
    )
    reference = parse_engine_spec(str(DIGITS_MODEL))
    # when
    built = compare_engines(reference, parse_engine_spec(f"{DIGITS_MODEL}@x86-cpu:int8"), DIGITS_HOLDOUT, setup)
    [entry] = engine_cache.entries()
    cached = compare_engines(reference, parse_engine_spec(entry.digest[:10]), DIGITS_HOLDOUT, setup)
    # then
    assert built.report == cached.report, "the cached engine is the one the spec built"
    assert "cached" in cached.b and entry.digest[:12] in cached.b
    [drift] = built.report.outputs
    assert 0.99 < drift.cosine < 1.0, f"int8 drifts a little from fp32: {drift}"
    assert built.report.top1_agreement is not None and built.report.top1_agreement >= 0.95
    assert built.failures(0.99) == [] and built.failures(0.999999) != [], "the threshold decides pass or fail"


def test_compare_engines_when_int8_spec_has_no_calibration_asks_for_calib(
    outlier: tuple[Path, Path], setup: CompareSetup
) -> None:
    model, data = outlier
    with pytest.raises(ConfigError, match="pass --calib DATA"):
        compare_engines(parse_engine_spec(str(model)), parse_engine_spec(f"{model}@x86-cpu:int8"), data, setup)


def test_compare_engines_when_digest_matches_nothing_or_several_says_so(
    outlier: tuple[Path, Path], setup: CompareSetup, engine_cache: EngineCache
) -> None:
    model, data = outlier
    for digest in ("abcd1111" + "0" * 24, "abcd2222" + "0" * 24):
        entry = engine_cache.root / digest
        entry.mkdir(parents=True)
        (entry / "manifest.json").write_text(json.dumps({"key": {}, "files": {}}))
    reference = parse_engine_spec(str(model))
    with pytest.raises(ConfigError, match="no cache entry starts with 'ffff'"):
        compare_engines(reference, parse_engine_spec("ffff"), data, setup)
    with pytest.raises(ConfigError, match=r"expected one cache entry, got 2 \(abcd11110000, abcd22220000\)"):
        compare_engines(reference, parse_engine_spec("abcd"), data, setup)


def test_compare_engines_when_models_share_no_output_raises_model_error(
    outlier: tuple[Path, Path], setup: CompareSetup, tmp_path: Path
) -> None:
    # given the same model with its output renamed
    model, data = outlier
    renamed = onnx.load(str(model))
    renamed.graph.output[0].name = "scores"
    for node in renamed.graph.node:
        node.output[:] = ["scores" if name == "logits" else name for name in node.output]
    onnx.save(renamed, str(tmp_path / "renamed.onnx"))
    # when / then
    with pytest.raises(ModelError, match=r"share output names, got \['logits'\] and \['scores'\]"):
        compare_engines(parse_engine_spec(str(model)), parse_engine_spec(str(tmp_path / "renamed.onnx")), data, setup)


def test_compare_engines_when_pipeline_folds_preprocessing_matches_numpy_preprocessing(
    tmp_path: Path, tiny_models: dict[str, Path], setup: CompareSetup
) -> None:
    # given a float model whose pipeline scales and normalises frames, and a folder of frames
    from edge_sdk.core.opencv import import_cv2

    frames = tmp_path / "frames"
    frames.mkdir()
    rng = np.random.default_rng(5)
    for index in range(6):
        import_cv2().imwrite(str(frames / f"{index}.png"), rng.integers(0, 256, (24, 32, 3), dtype=np.uint8))
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(
        f"name: t\nmodel: {{path: {tiny_models['float_classifier']}}}\n"
        "preprocess: {resize: [8, 8], layout: nchw, dtype: float32, scale: 0.00392156862745098, "
        "mean: [0.5, 0.5, 0.5], std: [0.25, 0.25, 0.25]}\n"
        "sources: [{uri: 'synthetic://?frames=2&size=8x8'}]\n"
        "postprocess: {type: classification, output: logits}\n"
    )
    config = load_pipeline(pipeline)
    setup = CompareSetup(
        catalog=setup.catalog, cache=setup.cache, preprocess=config.preprocess, postprocess=config.postprocess
    )
    model = str(tiny_models["float_classifier"])
    # when: the reference gets numpy-preprocessed tensors, the engine raw frames (preprocessing folded in)
    result = compare_engines(parse_engine_spec(model), parse_engine_spec(f"{model}@x86-cpu"), frames, setup)
    # then
    [drift] = result.report.outputs
    assert result.samples == 6
    assert drift.cosine > 0.9999, f"folded preprocessing must match numpy preprocessing: {drift}"
    assert result.report.top1_agreement == 1.0
    [entry] = setup.cache.entries()
    passes = [report["name"] for report in entry.manifest["facts"]["graph_passes"]]
    assert "preprocess_folding" in passes, "the engine side must really take raw frames"


def test_engine_comparison_when_detection_judges_matched_boxes_not_raw_cosine() -> None:
    # given a detection comparison: boxes in another NMS order (low raw cosine), one box in ten lost
    report = AccuracyReport(
        samples=10,
        outputs=(OutputDrift("detection_boxes:0", 0.75, 0.9, 0.3),),
        matched_boxes=0.9,
        score_drift=0.02,
        reference_boxes=10,
        candidate_boxes=9,
        matched_count=9,
        extra_boxes=0,
        task="detection",
    )
    comparison = EngineComparison("A", "B", 10, report)
    # then
    assert comparison.failures(min_cosine=0.99) == [], "raw detection tensors are not compared by cosine"
    [failure] = comparison.failures(min_cosine=0.99, max_drop=5.0)
    assert "matched boxes 90.00%: B found 9 of A's 10 boxes" in failure and "10.00 points lost" in failure
    assert comparison.failures(max_drop=10.0) == []
