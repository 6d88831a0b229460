"""Every pipeline file shipped in pipelines/ runs, unchanged, against the repo's models."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import pytest

from edge_sdk.engines.cache import EngineCache
from edge_sdk.pipeline.config import load_pipeline
from edge_sdk.pipeline.run import run_pipeline
from edge_sdk.profiles import DeviceProfile
from tools.make_example_models import write_example_models

from .conftest import REPO_ROOT

pytestmark = pytest.mark.slow  # multi-process runs or subprocesses: not in make test-fast

PIPELINES = sorted((REPO_ROOT / "pipelines").glob("*.yaml"))


@pytest.fixture
def sandbox(tmp_path: Path, small_video: Path) -> Path:
    """A copy of the repo layout the pipeline files expect, with a short demo video and the example
    models (`tools/make_example_models.py`) in build/."""
    shutil.copytree(REPO_ROOT / "pipelines", tmp_path / "pipelines")
    (tmp_path / "models").symlink_to(REPO_ROOT / "models")
    (tmp_path / "tools").symlink_to(REPO_ROOT / "tools")
    (tmp_path / "build" / "demo").mkdir(parents=True)
    shutil.copy(small_video, tmp_path / "build" / "demo" / "demo.mp4")
    write_example_models(tmp_path / "build" / "models")
    return tmp_path


def test_pipelines_folder_when_listed_is_not_empty() -> None:
    assert PIPELINES, "pipelines/ ships at least the demo pipeline"
    assert {"demo", "yolo"} <= {path.stem for path in PIPELINES}, "a YOLO example ships beside the demo"


@pytest.mark.parametrize("pipeline", PIPELINES, ids=lambda p: p.stem)
def test_shipped_pipeline_when_run_produces_a_result_per_frame_and_no_sink_failure(
    pipeline: Path, sandbox: Path, cpu_profile: DeviceProfile, engine_cache: EngineCache
) -> None:
    # given the file as shipped, in a copy of the repo layout
    config = load_pipeline(sandbox / "pipelines" / pipeline.name)
    # when
    with contextlib.redirect_stdout(io.StringIO()):
        summary = run_pipeline(config, cpu_profile, engine_cache)
    # then
    assert summary.frames > 0, f"{pipeline.name} must process frames"
    assert summary.sink_failures == {}, f"no sink of {pipeline.name} may fail: {summary.sink_failures}"
    for sink in config.sinks:
        if sink.type == "jsonl":
            lines = sink.path.read_text().splitlines()
            assert len(lines) == summary.frames, "one JSON line per frame"
            assert all("detections" in json.loads(line) for line in lines)


def test_demo_pipeline_when_run_finds_the_astronaut_in_most_frames(
    sandbox: Path, cpu_profile: DeviceProfile, engine_cache: EngineCache
) -> None:
    config = load_pipeline(sandbox / "pipelines" / "demo.yaml")
    with contextlib.redirect_stdout(io.StringIO()):
        run_pipeline(config, cpu_profile, engine_cache)
    results = [json.loads(line) for line in (sandbox / "build" / "demo" / "results.jsonl").read_text().splitlines()]
    with_person = [r for r in results if any(d["label"] == "person" for d in r["detections"])]
    assert len(with_person) >= 0.9 * len(results), "the person detector must find the astronaut in the demo video"
    assert (sandbox / "build" / "demo" / "annotated.mp4").stat().st_size > 0, "the demo writes an annotated video"


def test_yolo_pipeline_when_run_finds_the_orange_suit_as_red_in_every_frame(
    sandbox: Path, cpu_profile: DeviceProfile, engine_cache: EngineCache
) -> None:
    config = load_pipeline(sandbox / "pipelines" / "yolo.yaml")
    with contextlib.redirect_stdout(io.StringIO()):
        summary = run_pipeline(config, cpu_profile, engine_cache)
    results = [json.loads(line) for line in (sandbox / "build" / "yolo" / "results.jsonl").read_text().splitlines()]
    assert len(results) == summary.frames == 24
    assert all(any(d["label"] == "red" for d in r["detections"]) for r in results), "the suit is red in every frame"
    assert all(d["label"] in ("red", "green", "blue") for r in results for d in r["detections"])
