"""INT8 builds on ONNX Runtime, for real: calibrated, gated on held-out data, cached, recorded in the manifest."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edge_sdk.backends.calibration import Calibration, Int8Settings, TaskSpec, open_calibration_data
from edge_sdk.core.errors import ConfigError, EngineBuildError
from edge_sdk.core.host import HostFacts
from edge_sdk.core.model_file import ModelFile
from edge_sdk.core.opencv import import_cv2
from edge_sdk.core.preprocess import PreprocessSpec
from edge_sdk.engines.cache import EngineCache
from edge_sdk.engines.engine import PreparedEngine, prepare_engine
from edge_sdk.graph.options import GraphOptions
from edge_sdk.profiles import DeviceProfile

from ..conftest import REPO_ROOT
from .conftest import TEST_HOST

DIGITS = REPO_ROOT / "models" / "digits_cnn.onnx"
DIGITS_CALIBRATION = REPO_ROOT / "models" / "digits_calibration.npz"
DIGITS_HOLDOUT = REPO_ROOT / "models" / "digits_holdout.npz"
FP32_HOLDOUT_ACCURACY = 536 / 539  # models/README.md


def digits_calibration(profile: DeviceProfile, data: Path = DIGITS_CALIBRATION, **settings: Any) -> Calibration:
    model = ModelFile.load(DIGITS)
    base = profile.int8 or Int8Settings()
    chosen = base.model_copy(update={"max_accuracy_drop": 0.5, **settings})
    return Calibration(
        open_calibration_data(data, model, limit=chosen.max_samples), chosen, TaskSpec(kind="classification")
    )


def holdout_accuracy(prepared: PreparedEngine) -> float:
    data = np.load(DIGITS_HOLDOUT)
    with prepared.open() as runner:
        predictions = [int(np.argmax(runner.infer({"image": image[np.newaxis]})["logits"])) for image in data["image"]]
    return float(np.mean(np.array(predictions) == data["labels"]))


@pytest.fixture(scope="module")
def digits_cache(tmp_path_factory: pytest.TempPathFactory) -> EngineCache:
    return EngineCache(tmp_path_factory.mktemp("int8-cache"))


@pytest.fixture(scope="module")
def digits_int8(digits_cache: EngineCache, cpu_profile: DeviceProfile) -> PreparedEngine:
    """The digits CNN built in int8 for x86-cpu from the shipped calibration set (gate: 0.5 points)."""
    return prepare_engine(
        DIGITS, cpu_profile, "int8", digits_cache, TEST_HOST, calibration=digits_calibration(cpu_profile)
    )


def test_int8_build_when_digits_are_calibrated_keeps_holdout_accuracy_within_half_a_point(
    digits_int8: PreparedEngine,
) -> None:
    # Given the digits CNN built in int8 (calibrated on 3/4 of the calibration set, gated on the rest)
    assert digits_int8.built, "the first prepare builds"
    assert (digits_int8.entry.directory / "model.int8.onnx").is_file(), "the quantised model is kept in the entry"

    # When it classifies the 539 held-out digits it never saw
    accuracy = holdout_accuracy(digits_int8)

    # Then it loses at most half a point against FP32
    assert accuracy >= FP32_HOLDOUT_ACCURACY - 0.005, (
        f"int8 accuracy {accuracy:.2%} vs fp32 {FP32_HOLDOUT_ACCURACY:.2%}"
    )


def test_int8_manifest_when_built_records_how_it_was_quantised_and_what_accuracy_it_measured(
    digits_int8: PreparedEngine,
) -> None:
    facts = digits_int8.entry.manifest["facts"]["int8"]
    assert digits_int8.entry.key["calibration_sha256"], "the calibration is part of the cache key"
    assert (facts["method"], facts["format"], facts["activation_type"], facts["weight_type"]) == (
        "minmax",
        "QDQ",
        "uint8",
        "int8",
    ), "x86-cpu quantises QDQ with uint8 activations and int8 weights"
    assert facts["per_channel"] is True and facts["excluded_nodes"] == []
    assert facts["samples"] == {"calibration": 150, "held_out": 50}, "200 of 300 samples, every 4th held out"
    assert facts["int8_nodes"] > 0, "convolutions and the classifier run in int8"
    accuracy = facts["accuracy"]
    assert accuracy["task"] == "classification" and accuracy["samples"] == 50
    assert accuracy["candidate_accuracy"] >= accuracy["reference_accuracy"] - 0.005
    assert accuracy["outputs"][0]["name"] == "logits" and accuracy["outputs"][0]["cosine"] > 0.99


def test_int8_build_when_prepared_again_with_the_same_data_comes_from_the_cache(
    digits_int8: PreparedEngine, digits_cache: EngineCache, cpu_profile: DeviceProfile
) -> None:
    again = prepare_engine(
        DIGITS, cpu_profile, "int8", digits_cache, TEST_HOST, calibration=digits_calibration(cpu_profile)
    )
    assert not again.built, "same model, profile, data and settings: the cached engine"
    assert again.entry.directory == digits_int8.entry.directory


@pytest.mark.parametrize(
    "change",
    [pytest.param({"method": "percentile"}, id="method"), pytest.param({"data": DIGITS_HOLDOUT}, id="data")],
)
def test_int8_build_when_calibration_method_or_data_change_builds_a_new_engine(
    digits_int8: PreparedEngine, digits_cache: EngineCache, cpu_profile: DeviceProfile, change: dict[str, Any]
) -> None:
    calibration = digits_calibration(cpu_profile, **change)
    other = prepare_engine(DIGITS, cpu_profile, "int8", digits_cache, TEST_HOST, calibration=calibration)
    assert other.built and other.entry.directory != digits_int8.entry.directory, "a new key, a new engine"


def test_int8_build_when_the_gate_cannot_pass_fails_with_a_report_and_caches_nothing(
    tmp_path: Path, cpu_profile: DeviceProfile, host_facts: HostFacts
) -> None:
    # Given a gate no int8 engine can meet (outputs identical to fp32)
    cache = EngineCache(tmp_path / "engines")
    calibration = digits_calibration(cpu_profile, min_cosine=1.0)

    # When the int8 build runs
    with pytest.raises(EngineBuildError) as error:
        prepare_engine(DIGITS, cpu_profile, "int8", cache, host_facts, calibration=calibration)

    # Then the error says which metric failed, measured vs allowed, and nothing is cached
    message = str(error.value)
    assert "failed the accuracy gate on 50 held-out samples" in message
    assert "output 'logits' cosine similarity 0.9" in message and "allowed minimum 1" in message
    assert "--fallback mixed" in message, "the report says how to build anyway"
    assert "\n" not in message, "one paragraph"
    assert cache.entries() == [], "a failed build leaves no entry"


def test_int8_build_when_mixed_fallback_is_asked_keeps_the_sensitive_layer_in_float(
    tmp_path: Path, cpu_profile: DeviceProfile, host_facts: HostFacts
) -> None:
    from ..backends.int8_models import SENSITIVE_NODE, labelled_samples, outlier_cnn, save_npz

    # Given a CNN whose first convolution int8 ruins (calibration data with huge outlier pixels)
    model = outlier_cnn(tmp_path / "outlier.onnx")
    samples, labels = labelled_samples(model)
    data = save_npz(tmp_path / "data.npz", samples, labels)
    settings = Int8Settings(max_accuracy_drop=5.0, min_cosine=0.9, fallback="mixed", reduce_range=True)
    calibration = Calibration(
        open_calibration_data(data, ModelFile.load(model)), settings, TaskSpec(kind="classification")
    )

    # When it is built in int8 with the mixed-precision fallback
    prepared = prepare_engine(
        model, cpu_profile, "int8", EngineCache(tmp_path / "engines"), host_facts, calibration=calibration
    )

    # Then that layer stays in float, the others are int8, and the manifest says so with the accuracy reached
    facts = prepared.entry.manifest["facts"]["int8"]
    assert SENSITIVE_NODE in facts["excluded_nodes"], f"the sensitive layer must stay float: {facts['excluded_nodes']}"
    assert facts["int8_nodes"] > 0, "the other layers stay int8"
    accuracy = facts["accuracy"]
    assert 100 * (accuracy["reference_accuracy"] - accuracy["candidate_accuracy"]) <= 5.0


def test_int8_build_when_preprocessing_is_folded_calibrates_on_raw_frames(
    tmp_path: Path, tiny_models: dict[str, Path], cpu_profile: DeviceProfile, host_facts: HostFacts
) -> None:
    # Given a folder of photos and the float classifier's preprocessing, folded into the engine graph
    folder = tmp_path / "photos"
    folder.mkdir()
    rng = np.random.default_rng(5)
    for index in range(12):
        assert import_cv2().imwrite(str(folder / f"{index}.png"), rng.integers(0, 256, (24, 32, 3), dtype=np.uint8))
    spec = PreprocessSpec(resize=(8, 8), layout="nchw", dtype="float32", scale=1 / 255)
    model = ModelFile.load(tiny_models["float_classifier"])
    calibration = Calibration(open_calibration_data(folder, model, spec), Int8Settings(min_cosine=0.98), TaskSpec())

    # When it is built in int8
    prepared = prepare_engine(
        model,
        cpu_profile,
        "int8",
        EngineCache(tmp_path / "engines"),
        host_facts,
        graph=GraphOptions(preprocess=spec),
        calibration=calibration,
    )

    # Then the engine takes raw BGR frames and was calibrated and checked on them
    assert [meta.dtype for meta in prepared.inputs] == [np.dtype(np.uint8)], "raw frames go in"
    assert prepared.entry.manifest["facts"]["int8"]["samples"] == {"calibration": 9, "held_out": 3}


def test_int8_build_when_no_calibration_is_given_asks_for_data(tmp_path: Path, cpu_profile: DeviceProfile) -> None:
    with pytest.raises(ConfigError, match="int8 needs calibration data"):
        prepare_engine(DIGITS, cpu_profile, "int8", EngineCache(tmp_path / "engines"), TEST_HOST)


def test_int8_build_when_calibration_has_outliers_records_the_range_warning_in_the_manifest(
    tmp_path: Path, cpu_profile: DeviceProfile, host_facts: HostFacts
) -> None:
    from ..backends.int8_models import SPIKED_TENSOR, labelled_samples, outlier_cnn, save_npz

    # Given calibration data whose few spiked pixels stretch the input's range far past ordinary values
    model = outlier_cnn(tmp_path / "outlier.onnx")
    samples, labels = labelled_samples(model)
    data = save_npz(tmp_path / "data.npz", samples, labels)
    settings = Int8Settings(max_accuracy_drop=5.0, min_cosine=0.9, fallback="mixed", reduce_range=True)
    calibration = Calibration(
        open_calibration_data(data, ModelFile.load(model)), settings, TaskSpec(kind="classification")
    )

    # When it is built in int8
    prepared = prepare_engine(
        model, cpu_profile, "int8", EngineCache(tmp_path / "engines"), host_facts, calibration=calibration
    )

    # Then the manifest warns, before deployment, that this tensor would lose precision in int8
    warnings = prepared.entry.manifest["facts"]["int8"]["range_warnings"]
    assert any(w["tensor"] == SPIKED_TENSOR and w["kind"] == "precision" for w in warnings), (
        f"the stretched input range must be reported, got {warnings}"
    )
