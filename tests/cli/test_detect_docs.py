"""docs/models.md as a user follows it: every `sh` block runs from a copy of the repository (with a
short demo video where `make demo` puts it), the lines it shows detect printing are what detect
prints, its error is the one detect gives, and its pipeline examples are valid pipeline files."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from edge_sdk.core.tensor_meta import TensorMeta
from edge_sdk.pipeline.config import PipelineConfig
from edge_sdk.postprocess.guess import UnrecognisedOutputs
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.slow  # edge-sdk subprocesses and multi-process runs: not in make test-fast

GUIDE = (REPO_ROOT / "docs" / "models.md").read_text(encoding="utf-8")
SH_BLOCKS = re.findall(r"```sh\n(.*?)```", GUIDE, re.S)
TEXT_BLOCKS = re.findall(r"```text\n(.*?)```", GUIDE, re.S)
YAML_BLOCKS = re.findall(r"```yaml\n(.*?)```", GUIDE, re.S)


def commands() -> list[str]:
    """The commands of every sh block, in order, without their trailing comments."""
    lines = [line.split("  #")[0].strip() for block in SH_BLOCKS for line in block.splitlines()]
    return [line for line in lines if line]


@pytest.fixture
def repo_copy(tmp_path: Path, small_video: Path) -> Path:
    for name in ("models", "tools", "device_profiles"):
        (tmp_path / name).symlink_to(REPO_ROOT / name)
    shutil.copytree(REPO_ROOT / "pipelines", tmp_path / "pipelines")
    (tmp_path / "build" / "demo").mkdir(parents=True)
    shutil.copy(small_video, tmp_path / "build" / "demo" / "demo.mp4")
    return tmp_path


def test_the_guide_shows_detect_on_each_model_family_and_the_yolo_pipeline() -> None:
    shown = "\n".join(commands())
    for model in ("ssdlite_mobilenet_v2_person.onnx", "colour_yolov8.onnx", "colour_classifier.onnx"):
        assert f"edge-sdk detect models/{model}" in shown or f"edge-sdk detect build/models/{model}" in shown
    assert "edge-sdk run pipelines/yolo.yaml" in shown and "--save-pipeline" in shown


def test_the_guides_commands_run_as_written_and_print_the_lines_it_shows(repo_copy: Path) -> None:
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "EDGE_SDK_CACHE_DIR": str(repo_copy / "cache"),
    }
    printed = []
    for command in commands():
        done = subprocess.run(
            command, shell=True, cwd=repo_copy, env=env, capture_output=True, text=True, timeout=240, check=False
        )
        assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
        printed.append(done.stdout)
    shown = [line for line in TEXT_BLOCKS[0].splitlines() if line.startswith("model: ")]
    assert len(shown) == 3
    for line in shown:
        assert any(line in out.splitlines() for out in printed), f"detect does not print: {line}"
    assert (repo_copy / "build" / "detect" / "colour_yolov8.yaml").is_file()
    assert (repo_copy / "build" / "yolo" / "results.jsonl").is_file()


def test_the_guides_error_is_the_one_detect_gives_for_that_output() -> None:
    error = next(block for block in TEXT_BLOCKS if block.startswith("error: ")).strip()
    feature_map = TensorMeta("features", np.dtype("float32"), (1, 8, 32, 32))
    assert error == f"error: {UnrecognisedOutputs([feature_map])}"


@pytest.mark.parametrize("index", range(len(YAML_BLOCKS)))
def test_the_guides_pipeline_examples_are_valid_pipeline_files(index: int) -> None:
    PipelineConfig.model_validate(yaml.safe_load(YAML_BLOCKS[index]))
