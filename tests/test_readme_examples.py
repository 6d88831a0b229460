"""The README's Python blocks run as written, from the repository root, against a short demo video."""

from __future__ import annotations

import contextlib
import io
import re
import shutil
from pathlib import Path

import pytest

from .conftest import REPO_ROOT

pytestmark = pytest.mark.slow  # the second block runs the multi-process runtime

BLOCKS = re.findall(r"```python\n(.*?)```", (REPO_ROOT / "README.md").read_text(encoding="utf-8"), re.S)


def test_the_readme_has_python_examples() -> None:
    assert len(BLOCKS) >= 3, "the README shows the Python API (profiles, a pipeline, an engine)"


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_python_block_runs_as_written(
    index: int, tmp_path: Path, small_video: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the repository layout the blocks use, with a short video where `make demo` puts the demo one
    for name in ("models", "tools", "device_profiles"):
        (tmp_path / name).symlink_to(REPO_ROOT / name)
    shutil.copytree(REPO_ROOT / "pipelines", tmp_path / "pipelines")
    (tmp_path / "build" / "demo").mkdir(parents=True)
    shutil.copy(small_video, tmp_path / "build" / "demo" / "demo.mp4")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("EDGE_SDK_CACHE_DIR", str(tmp_path / "cache"))
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(BLOCKS[index], f"README.md python block {index + 1}", "exec"), {})
    assert printed.getvalue().strip(), "each block prints what it got"
