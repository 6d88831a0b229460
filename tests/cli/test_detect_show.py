"""`--show` on `detect` and `run`: a preview sink is served while the pipeline runs and the page opens
in the browser ($BROWSER here: a small program that loads the page's stats as a browser's page would)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ASTRONAUT, DEMO_MODEL

from .run_process import EDGE_SDK

pytestmark = pytest.mark.slow  # edge-sdk subprocesses: not in make test-fast

LIVE_CAMERA = f"synthetic://?image={ASTRONAUT}&frames=90&size=320x240&fps=30&realtime=true"
"""Three seconds of a 30 FPS virtual camera: long enough for the browser to find the pipeline running."""


def fake_browser(folder: Path) -> tuple[Path, Path]:
    """A $BROWSER that records the address it is asked to open and what that page's /stats.json says."""
    record = folder / "opened.json"
    program = folder / "browser.py"
    program.write_text(
        f"#!{sys.executable}\n"
        "import json, sys, urllib.request\n"
        "url = sys.argv[1]\n"
        "stats = json.load(urllib.request.urlopen(url + 'stats.json', timeout=5))\n"
        f"open({str(record)!r}, 'w').write(json.dumps({{'url': url, 'stats': stats}}))\n",
        encoding="utf-8",
    )
    program.chmod(0o755)
    return program, record


def run_cli(tmp_path: Path, browser: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "BROWSER": str(browser), "EDGE_SDK_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("DISPLAY", None)
    return subprocess.run(
        [EDGE_SDK, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240, check=False
    )


def served_url(stderr: str) -> str:
    found = re.search(r"preview: watch the pipeline at (http://\S+/)", stderr)
    assert found, f"the preview's address is printed: {stderr}"
    return found.group(1)


def test_detect_show_serves_the_preview_and_opens_it_in_the_browser(tmp_path: Path) -> None:
    browser, opened = fake_browser(tmp_path)
    done = run_cli(tmp_path, browser, "detect", str(DEMO_MODEL), LIVE_CAMERA, "--labels", "person", "--show")
    assert done.returncode == 0, done.stderr
    record = json.loads(opened.read_text(encoding="utf-8"))
    assert record["url"] == served_url(done.stderr)
    assert record["stats"]["pipeline"] == "ssdlite_mobilenet_v2_person" and record["stats"]["source"] in (
        None,
        "synthetic",
    )
    assert "outputs in" in done.stdout and "annotated.mp4, results.jsonl" in done.stdout


def test_run_show_adds_a_preview_to_a_pipeline_without_one_and_opens_it(tmp_path: Path) -> None:
    browser, opened = fake_browser(tmp_path)
    pipeline = tmp_path / "door.yaml"
    document = {
        "name": "door",
        "model": {"path": str(DEMO_MODEL)},
        "preprocess": {"resize": [300, 300]},
        "sources": [{"uri": LIVE_CAMERA, "name": "door"}],
        "postprocess": {"type": "ssd", "labels": ["person"]},
        "sinks": [{"type": "jsonl", "path": "out/results.jsonl"}],
    }
    pipeline.write_text(yaml.safe_dump(document), encoding="utf-8")
    done = run_cli(tmp_path, browser, "run", str(pipeline), "--show", "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["frames"] > 0 and summary["outputs"] == [str(tmp_path / "out" / "results.jsonl")]
    record = json.loads(opened.read_text(encoding="utf-8"))
    assert record["url"] == served_url(done.stderr) and record["stats"]["pipeline"] == "door"
