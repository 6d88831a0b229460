"""docs/pipelines.md: every YAML block is a valid pipeline file, and the complete one runs."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from edge_sdk import load_pipeline, run_pipeline
from edge_sdk.engines.cache import EngineCache
from edge_sdk.profiles import DeviceProfile

from .conftest import REPO_ROOT

GUIDE = REPO_ROOT / "docs" / "pipelines.md"
BLOCKS = re.findall(r"^```yaml\n(.*?)^```", GUIDE.read_text(encoding="utf-8"), re.S | re.M)


@pytest.fixture
def checkout(tmp_path: Path, small_video: Path) -> Path:
    """The repository's layout, with a short video where `make demo` puts the demo one."""
    for name in ("models", "tools"):
        (tmp_path / name).symlink_to(REPO_ROOT / name)
    (tmp_path / "pipelines").mkdir()
    shutil.copy(REPO_ROOT / "pipelines" / "pipeline.schema.json", tmp_path / "pipelines")
    (tmp_path / "build" / "demo").mkdir(parents=True)
    shutil.copy(small_video, tmp_path / "build" / "demo" / "demo.mp4")
    return tmp_path


def test_the_guide_shows_pipelines() -> None:
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_every_pipeline_in_the_guide_loads(index: int, checkout: Path) -> None:
    path = checkout / "pipelines" / f"block{index + 1}.yaml"
    path.write_text(BLOCKS[index], encoding="utf-8")
    config = load_pipeline(path)
    assert config.sources and config.sinks


def test_the_guides_complete_pipeline_runs_and_writes_its_results(
    checkout: Path, cpu_profile: DeviceProfile, engine_cache: EngineCache
) -> None:
    path = checkout / "pipelines" / "people.yaml"
    path.write_text(BLOCKS[0], encoding="utf-8")
    config = load_pipeline(path)
    summary = run_pipeline(config, cpu_profile, engine_cache)
    rows = [json.loads(line) for line in (checkout / "build" / "people" / "results.jsonl").read_text().splitlines()]
    assert summary.frames == len(rows) > 0
    assert any(d["label"] == "person" for row in rows for d in row["detections"]), "the astronaut is found"
    assert (checkout / "build" / "people" / "annotated.mp4").stat().st_size > 0
