"""The model index: a start with a cached engine reads what it needs of the model from the index, so
it never imports onnx (about a second on a small box); a record that does not match is never trusted."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from edge_sdk.core.model_file import ModelFile
from edge_sdk.engines.cache import MODEL_INDEX, EngineCache
from edge_sdk.engines.engine import prepare_engine
from edge_sdk.profiles import DeviceProfile
from tools.harness.onnx_models import float_classifier

REPO = Path(__file__).resolve().parents[2]


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


def test_a_pipeline_started_with_its_engine_cached_never_imports_onnx(tmp_path: Path) -> None:
    # Given the demo detector in a pipeline run twice, each time in a fresh process
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(
        f"""
name: cached-start
model: {{path: {REPO / "models" / "ssdlite_mobilenet_v2_person.onnx"}}}
preprocess: {{resize: [300, 300], color: rgb, layout: nhwc, dtype: uint8}}
sources: [{{uri: "synthetic://?frames=12&size=320x240"}}]
postprocess: {{type: ssd, labels: [person]}}
sinks: [{{type: jsonl, path: {tmp_path / "results.jsonl"}}}]
runtime: {{mode: inline}}
"""
    )
    script = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path

        from edge_sdk.engines.cache import EngineCache
        from edge_sdk.pipeline.config import load_pipeline
        from edge_sdk.pipeline.run import run_pipeline
        from edge_sdk.profiles import ProfileCatalog

        if __name__ == "__main__":
            config = load_pipeline({str(pipeline)!r})
            summary = run_pipeline(config, ProfileCatalog().load("x86-cpu"), EngineCache(Path({str(tmp_path / "cache")!r})))
            print(summary.frames, summary.engine_built, "onnx" in sys.modules)
        """
    )
    runs = [
        subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=REPO)
        for _ in range(2)
    ]
    assert all(run.returncode == 0 for run in runs), [run.stderr[-2000:] for run in runs]
    # Then the first run built the engine (which needs onnx), and the second started from the cache without it
    assert runs[0].stdout.split() == ["12", "True", "True"]
    assert runs[1].stdout.split() == ["12", "False", "False"], "a cached start must not import onnx"
