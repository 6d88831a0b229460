"""The model index: a start with a cached engine reads what it needs of the model from the index, so
it never imports onnx (about a second on a small box); a record that does not match is never trusted."""

from __future__ import annotations

import json
from pathlib import Path

from edge_sdk.core.model_file import ModelFile
from edge_sdk.engines.cache import MODEL_INDEX, EngineCache
from edge_sdk.engines.engine import prepare_engine
from edge_sdk.profiles import DeviceProfile
from tools.harness.onnx_models import float_classifier


def test_a_model_is_recorded_once_its_engine_is_cached_and_read_back_as_parsed(
    tmp_path: Path, cpu_profile: DeviceProfile
) -> None:
    model = float_classifier(tmp_path / "classifier.onnx")
    cache = EngineCache(tmp_path / "cache")
    parsed = cache.models.load(model)
    record = tmp_path / "cache" / MODEL_INDEX / f"{parsed.sha256}.json"
    assert not record.exists(), "no engine yet: nothing recorded"
    prepare_engine(model, cpu_profile, cache=cache)
    assert record.is_file()
    assert cache.models.load(model) == parsed == ModelFile.load(model)
    assert cache.not_entries() == [], "the index is the cache's own, not a foreign folder"


def test_a_corrupt_or_foreign_record_is_read_again_from_the_model(tmp_path: Path) -> None:
    model = float_classifier(tmp_path / "classifier.onnx")
    cache = EngineCache(tmp_path / "cache")
    cache.models.remember(ModelFile.load(model))
    record = tmp_path / "cache" / MODEL_INDEX / f"{ModelFile.load(model).sha256}.json"
    for broken in ("{not json", json.dumps({"sha256": "0" * 64, "inputs": [], "outputs": [], "opset": 1})):
        record.write_text(broken)
        assert cache.models.load(model) == ModelFile.load(model)
        cache.models.remember(ModelFile.load(model))
        assert json.loads(record.read_text())["sha256"] == ModelFile.load(model).sha256, "the record is replaced"


def test_changed_model_bytes_get_their_own_record(tmp_path: Path) -> None:
    cache = EngineCache(tmp_path / "cache")
    path = tmp_path / "model.onnx"
    cache.models.remember(first := ModelFile.load(float_classifier(path)))
    second = cache.models.load(float_classifier(path, batch=1))
    assert first.sha256 != second.sha256 and second.inputs[0].shape[0] == 1
