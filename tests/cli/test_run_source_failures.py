"""`edge-sdk run`, in both runtimes, with a source that fails or holds a corrupt image."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import yaml

from edge_sdk.core.opencv import import_cv2
from edge_sdk.pipeline.frame_ring import segments_of

from .conftest import Run

pytestmark = pytest.mark.slow  # multi-process runs or subprocesses: not in make test-fast


@pytest.fixture(autouse=True)
def _wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """Summary lines unwrapped, as a log collector sees them."""
    monkeypatch.setenv("COLUMNS", "400")


@pytest.fixture(params=["inline", "processes"])
def mode(request: pytest.FixtureRequest) -> str:
    """The runtime: one loop, or stage processes over shared memory."""
    return str(request.param)


def write_pipeline(folder: Path, model: Path, source: dict[str, object], mode: str) -> Path:
    path = folder / "pipeline.yaml"
    document = {
        "name": "shelf-watch",
        "model": {"path": str(model)},
        "sources": [source],
        "postprocess": {"type": "classification", "output": "scores"},
        "sinks": [{"type": "jsonl", "path": "out/results.jsonl"}],
        "runtime": {"mode": mode, "inference_workers": 1},
    }
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


def test_run_when_source_file_is_missing_prints_one_line_and_exits_non_zero(
    edge_sdk: Run, tmp_path: Path, tiny_models: dict[str, Path], mode: str
) -> None:
    # given
    pipeline = write_pipeline(tmp_path, tiny_models["uint8_mean_classifier"], {"uri": "gone.mp4", "name": "door"}, mode)

    # when
    code, out, err = edge_sdk("run", pipeline, "--profile", "x86-cpu")

    # then
    assert code != 0, "a run whose source cannot be opened fails"
    assert "Traceback" not in err + out, "no traceback without --debug"
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, f"exactly one error line, got stderr {err!r}"
    assert "source door" in errors[0] and "not found" in errors[0], f"it names the source and the cause: {errors[0]}"
    assert str(tmp_path / "gone.mp4") in errors[0], "and the file it looked for"
    assert "frames in" not in out, "no summary claims a run that never started"
    assert segments_of(os.getpid()) == [], "no frame ring is left behind"


def test_run_when_folder_holds_a_corrupt_jpeg_reports_it_skipped_in_the_summary(
    edge_sdk: Run, tmp_path: Path, tiny_models: dict[str, Path], mode: str
) -> None:
    # given three good JPEGs and one of random bytes
    cv2 = import_cv2()
    folder = tmp_path / "shelf"
    folder.mkdir()
    rng = np.random.default_rng(2)
    for name in ("a", "b", "d"):
        assert cv2.imwrite(str(folder / f"{name}.jpg"), rng.integers(0, 256, (24, 32, 3), dtype=np.uint8))
    (folder / "c.jpg").write_bytes(rng.integers(0, 256, 2048, dtype=np.uint8).tobytes())
    pipeline = write_pipeline(tmp_path, tiny_models["uint8_mean_classifier"], {"uri": "images://shelf"}, mode)

    # when
    code, out, err = edge_sdk("run", pipeline, "--profile", "x86-cpu")
    json_code, json_out, _ = edge_sdk("run", pipeline, "--profile", "x86-cpu", "--json")

    # then
    assert code == 0, f"a corrupt image is skipped, not fatal: {err}"
    assert "3 frames" in out, f"the three good images are processed: {out}"
    assert "skipped frames (could not be decoded): shelf 1" in out, f"the summary names the source and the count: {out}"
    assert "c.jpg" in err, "the skipped file is named on stderr as it happens"
    assert json_code == 0 and json.loads(json_out)["frames_skipped"] == {"shelf": 1}, "the JSON summary has it too"


def test_run_when_source_stops_at_a_corrupt_jpeg_names_it_once_and_exits_non_zero(
    edge_sdk: Run, tmp_path: Path, tiny_models: dict[str, Path], mode: str
) -> None:
    # given two good JPEGs and a corrupt one sorted last, read with on_error: stop
    cv2 = import_cv2()
    folder = tmp_path / "shelf"
    folder.mkdir()
    rng = np.random.default_rng(4)
    for name in ("a", "b"):
        assert cv2.imwrite(str(folder / f"{name}.jpg"), rng.integers(0, 256, (24, 32, 3), dtype=np.uint8))
    (folder / "c.jpg").write_bytes(rng.integers(0, 256, 2048, dtype=np.uint8).tobytes())
    pipeline = write_pipeline(
        tmp_path, tiny_models["uint8_mean_classifier"], {"uri": "images://shelf", "on_error": "stop"}, mode
    )

    # when
    code, out, err = edge_sdk("run", pipeline, "--profile", "x86-cpu")

    # then
    assert code != 0, "a run whose source failed does not exit 0"
    assert "Traceback" not in out + err, "no traceback without --debug"
    lines = [line for line in (out + err).splitlines() if "c.jpg" in line]
    assert len(lines) == 1, f"the corrupt file is named on exactly one line, got {lines}"
    assert "shelf" in lines[0] and "cannot be decoded" in lines[0], f"the line names source and cause: {lines[0]}"
    assert "2 frames" in out, "the images before it were processed"
