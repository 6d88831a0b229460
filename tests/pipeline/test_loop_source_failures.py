"""The inline runtime (`runtime.mode: inline`) with sources that fail or hold damaged frames."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edge_sdk.core.errors import SourceError
from edge_sdk.core.opencv import import_cv2
from edge_sdk.core.status import StatusEvent, StatusKind
from edge_sdk.engines.cache import EngineCache
from edge_sdk.pipeline.loop import run_inline
from edge_sdk.profiles import DeviceProfile

from .test_loop import pipeline_file, read_jsonl

CLASSIFIER = {"type": "classification", "output": "scores"}


def jpeg_folder_with_one_corrupt(folder: Path, good: int = 4) -> Path:
    """`good` real JPEGs 0.jpg, 1.jpg, ... and 1a-corrupt.jpg of random bytes sorted between them."""
    cv2 = import_cv2()
    folder.mkdir()
    rng = np.random.default_rng(11)
    for number in range(good):
        image = rng.integers(0, 256, (24, 32, 3), dtype=np.uint8)
        assert cv2.imwrite(str(folder / f"{number}.jpg"), image), "test setup: OpenCV must write the JPEG"
    (folder / "1a-corrupt.jpg").write_bytes(rng.integers(0, 256, 2048, dtype=np.uint8).tobytes())
    return folder


def test_run_inline_when_a_jpeg_is_corrupt_processes_the_others_and_reports_it_skipped(
    tmp_path: Path, tiny_models: dict[str, Path], cpu_profile: DeviceProfile, engine_cache: EngineCache
) -> None:
    # given a folder of four good JPEGs and one corrupt one
    jpeg_folder_with_one_corrupt(tmp_path / "shelf")
    config = pipeline_file(
        tmp_path,
        model={"path": str(tiny_models["uint8_mean_classifier"])},
        sources=[{"uri": "images://shelf"}],
        postprocess=CLASSIFIER,
        sinks=[{"type": "jsonl", "path": "results.jsonl"}],
        runtime={"mode": "inline"},
    )
    events: list[StatusEvent] = []

    # when
    summary = run_inline(config, cpu_profile, engine_cache, on_status=events.append)

    # then
    assert summary.frames == 4, "every good image is processed"
    assert summary.frames_skipped == {"shelf": 1}, "the summary counts the corrupt image against its source"
    assert summary.to_dict()["frames_skipped"] == {"shelf": 1}, "and the JSON summary carries the count"
    assert [e.data["path"] for e in events if e.kind is StatusKind.FRAMES_SKIPPED] == [
        str(tmp_path / "shelf" / "1a-corrupt.jpg")
    ], "one status event names the corrupt file"
    assert [row["frame"] for row in read_jsonl(tmp_path / "results.jsonl")] == [0, 1, 2, 3], (
        "the sink holds one result per good image, numbered without a gap"
    )


def test_run_inline_when_the_video_file_is_missing_raises_one_source_error_before_any_engine_is_built(
    tmp_path: Path, tiny_models: dict[str, Path], cpu_profile: DeviceProfile, engine_cache: EngineCache
) -> None:
    # given
    config = pipeline_file(
        tmp_path,
        model={"path": str(tiny_models["uint8_mean_classifier"])},
        sources=[{"uri": "clips/gone.mp4", "name": "door"}],
        postprocess=CLASSIFIER,
        runtime={"mode": "inline"},
    )

    # when
    with pytest.raises(SourceError) as caught:
        run_inline(config, cpu_profile, engine_cache)

    # then
    message = str(caught.value)
    assert message.startswith("source door: ") and "not found" in message, f"names source and cause: {message}"
    assert str(tmp_path / "clips" / "gone.mp4") in message, "and the path it looked for"
    assert not caught.value.retryable, "a missing file is not worth a retry"
    assert not [p for p in engine_cache.root.rglob("*") if p.is_file()], (
        "no engine was built for a run that cannot start"
    )


def test_run_inline_when_on_error_is_stop_ends_that_source_at_the_corrupt_image_and_the_others_go_on(
    tmp_path: Path, tiny_models: dict[str, Path], cpu_profile: DeviceProfile, engine_cache: EngineCache
) -> None:
    # given a folder that stops at its corrupt image, next to an intact synthetic camera
    jpeg_folder_with_one_corrupt(tmp_path / "shelf")
    config = pipeline_file(
        tmp_path,
        model={"path": str(tiny_models["uint8_mean_classifier"])},
        sources=[
            {"uri": "images://shelf", "on_error": "stop"},
            {"uri": "synthetic://?frames=6&size=32x24", "name": "door"},
        ],
        postprocess=CLASSIFIER,
        sinks=[{"type": "jsonl", "path": "results.jsonl"}],
        runtime={"mode": "inline"},
    )
    events: list[StatusEvent] = []

    # when
    summary = run_inline(config, cpu_profile, engine_cache, on_status=events.append)

    # then
    (failure,) = summary.source_failures.items()
    assert failure[0] == "shelf" and "1a-corrupt.jpg" in failure[1], "the summary names the source and the file"
    assert "on_error: stop" in failure[1], "and says why it stopped there"
    rows = read_jsonl(tmp_path / "results.jsonl")
    assert [r["frame"] for r in rows if r["source"] == "shelf"] == [0, 1], "0.jpg and 1.jpg, before it, are kept"
    assert [r["frame"] for r in rows if r["source"] == "door"] == list(range(6)), "the other source is read to its end"
    assert [e.subject for e in events if e.kind is StatusKind.SOURCE_FAILED] == ["shelf"], "one failed event"
    assert summary.frames_skipped.get("shelf", 0) == 0, "nothing was skipped under stop"
