"""What a pipeline start imports: with its engine cached and no MQTT sink, neither onnx (the model index
answers what the start needs of the model) nor paho (the MQTT client loads with an MQTT sink): each
costs a noticeable part of a second on a small box."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # subprocesses: not in make test-fast

REPO = Path(__file__).resolve().parents[2]


def test_a_pipeline_started_with_its_engine_cached_imports_neither_onnx_nor_paho(tmp_path: Path) -> None:
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
            print(summary.frames, summary.engine_built, "onnx" in sys.modules, "paho" in sys.modules)
        """
    )
    runs = [
        subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=REPO)
        for _ in range(2)
    ]
    assert all(run.returncode == 0 for run in runs), [run.stderr[-2000:] for run in runs]
    # Then the first run built the engine (which needs onnx), and the second started from the cache without it
    assert runs[0].stdout.split() == ["12", "True", "True", "False"]
    assert runs[1].stdout.split() == ["12", "False", "False", "False"], "a cached start imports no onnx and no paho"
