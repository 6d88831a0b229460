"""A pipeline asking for an int8 engine: calibrated from the data its file names, gated, then run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from edge_sdk.core.errors import ConfigError
from edge_sdk.core.results import Result
from edge_sdk.engines.cache import EngineCache
from edge_sdk.pipeline.config import PipelineConfig, load_pipeline
from edge_sdk.pipeline.engine_setup import prepare_models
from edge_sdk.pipeline.loop import run_inline
from edge_sdk.profiles import DeviceProfile


def classifier_pipeline(folder: Path, model: Path, video: Path, **model_fields: Any) -> PipelineConfig:
    document = {
        "name": "int8",
        "model": {"path": str(model), "precision": "int8", **model_fields},
        "preprocess": {"resize": [8, 8], "layout": "nchw", "dtype": "float32", "scale": 1 / 255},
        "sources": [{"uri": str(video), "name": "clip"}],
        "postprocess": {"type": "classification", "output": "logits"},
        "runtime": {"mode": "inline"},
    }
    path = folder / "pipeline.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return load_pipeline(path)


def test_prepare_models_when_pipeline_asks_for_int8_calibrates_from_its_data_and_records_the_gate(
    tmp_path: Path,
    tiny_models: dict[str, Path],
    small_video: Path,
    cpu_profile: DeviceProfile,
    engine_cache: EngineCache,
) -> None:
    # Given a pipeline whose model is int8, calibrated on a video, with a folded preprocessing
    config = classifier_pipeline(
        tmp_path, tiny_models["float_classifier"], small_video, calibration={"data": str(small_video)}
    )

    # When its engines are prepared twice
    first = prepare_models(config, cpu_profile, engine_cache)
    second = prepare_models(config, cpu_profile, engine_cache)

    # Then an int8 engine is built once, from raw frames, and its manifest records the accuracy check
    assert first.primary.built and not second.primary.built, "the second run must reuse the calibrated engine"
    key = first.primary.entry.key
    assert key["precision"] == "int8", "the engine must be the int8 one the pipeline asks for"
    assert key["calibration_sha256"], "the calibration data must be part of the cache key"
    facts = first.primary.entry.manifest["facts"]
    assert "int8" in facts, f"the manifest must record the int8 build, got facts {sorted(facts)}"
    assert first.engine_input.dtype.name == "uint8", "folded preprocessing: raw uint8 frames go in"


def test_run_pipeline_when_model_is_int8_classifies_every_frame(
    tmp_path: Path,
    tiny_models: dict[str, Path],
    small_video: Path,
    cpu_profile: DeviceProfile,
    engine_cache: EngineCache,
) -> None:
    # Given an int8 pipeline calibrated on its own clip
    config = classifier_pipeline(
        tmp_path, tiny_models["float_classifier"], small_video, calibration={"data": str(small_video)}
    )
    results: list[Result] = []

    # When it runs
    run_inline(config, cpu_profile, engine_cache, on_result=results.append)

    # Then every frame of the clip gets a class
    assert len(results) == 24, "every frame of the 24-frame clip must be classified"
    assert all(r.classifications for r in results), "each result must carry the top class"


def test_prepare_models_when_int8_has_no_calibration_data_names_the_setting(
    tmp_path: Path,
    tiny_models: dict[str, Path],
    small_video: Path,
    cpu_profile: DeviceProfile,
    engine_cache: EngineCache,
) -> None:
    # Given an int8 pipeline without calibration data
    config = classifier_pipeline(tmp_path, tiny_models["float_classifier"], small_video)

    # When its engines are prepared
    with pytest.raises(ConfigError) as raised:
        prepare_models(config, cpu_profile, engine_cache)

    # Then the error says which setting to add, and nothing was built
    assert "model.calibration.data" in str(raised.value), "the error must name the pipeline setting"
    assert not engine_cache.root.exists() or not any(engine_cache.root.iterdir()), "nothing may be built"
