"""The agent sink's preview thumbnails: latest per source in the outbox, small, paced, and never a failure."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from edge_sdk.core.errors import ConfigError
from edge_sdk.core.opencv import import_cv2
from edge_sdk.core.results import FrameMeta, Result
from edge_sdk.fleet.wire import telemetry
from edge_sdk.pipeline.config import load_pipeline
from edge_sdk.sinks.agent import AgentSink, AgentSinkSpec, ResultsOutbox
from edge_sdk.sinks.agent_preview import MAX_PREVIEW_BYTES, AgentPreviewSpec
from edge_sdk.sources.synthetic import PanZoomSource
from tests.sinks.test_sinks import make_result

ASTRONAUT = Path(__file__).resolve().parents[2] / "tools" / "assets" / "astronaut.jpg"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def camera_frames(count: int, size: tuple[int, int] = (640, 480)) -> list[np.ndarray]:
    """Frames of a camera panning across a photo (they differ from one to the next)."""
    with PanZoomSource(ASTRONAUT, frames=count, size=size) as source:
        return [frame.image for frame in source]


def empty_result(index: int, source: str = "cam") -> Result:
    return Result(frame=FrameMeta(source=source, index=index, timestamp=1000.0 + index, width=640, height=480))


def preview_sink(tmp_path: Path, preview: AgentPreviewSpec | None) -> tuple[AgentSink, ResultsOutbox, Clock]:
    agent_side = ResultsOutbox(tmp_path / "outbox.sqlite", create=True)
    sink = AgentSink("people", outbox=tmp_path / "outbox.sqlite", preview=preview)
    clock = Clock()
    if sink.thumbnails is not None:
        sink.thumbnails._clock = clock
    sink.open()
    return sink, agent_side, clock


def test_preview_when_frames_come_then_the_latest_thumbnail_per_source_is_kept_at_most_every_every_s(
    tmp_path: Path,
) -> None:
    # given an agent sink with previews every 2 s, 320 wide, and a camera panning over a photo
    sink, agent_side, clock = preview_sink(tmp_path, AgentPreviewSpec())
    frames = camera_frames(12)

    # when two sources send 6 frames each, 0.5 s apart, none with a detection
    for index, image in enumerate(frames):
        sink.write(empty_result(index, source="cam" if index % 2 else "door"), image)
        if index % 2:
            clock.now += 0.5

    # then each source has one thumbnail, its latest: of its first frame and of its frame 2 s later
    previews = {entry.source: entry for entry in agent_side.unsent_previews()}
    assert set(previews) == {"cam", "door"}
    assert sink.previews == 4 and sink.thumbnails is not None and sink.thumbnails.made == 4
    assert previews["cam"].seq == 2 and previews["door"].seq == 2
    assert sink.handed == 0, "frames without detections are not handed over as results"

    # and each is a JPEG, 320 wide with the frame's aspect, within max_bytes, of the frame it came from
    cv2 = import_cv2()
    for entry in previews.values():
        assert len(entry.jpeg) <= 32768
        decoded = cv2.imdecode(np.frombuffer(entry.jpeg, np.uint8), cv2.IMREAD_COLOR)
        assert decoded.shape == (240, 320, 3)
    door = cv2.imdecode(np.frombuffer(previews["door"].jpeg, np.uint8), cv2.IMREAD_COLOR).astype(np.int16)
    expected = cv2.resize(frames[8], (320, 240), interpolation=cv2.INTER_AREA).astype(np.int16)
    first = cv2.resize(frames[0], (320, 240), interpolation=cv2.INTER_AREA).astype(np.int16)
    assert np.abs(door - expected).mean() < np.abs(door - first).mean(), "the newest frame is shown"

    # and once the agent has sent it, it is not waiting any more, until a newer one comes
    agent_side.preview_sent(previews["door"])
    assert [entry.source for entry in agent_side.unsent_previews()] == ["cam"]
    clock.now += 2.0
    sink.write(empty_result(12, source="door"), frames[0])
    assert sorted(entry.source for entry in agent_side.unsent_previews()) == ["cam", "door"]
    sink.close()
    agent_side.close()


def test_preview_when_marked_sent_after_a_newer_one_replaced_it_then_the_newer_one_still_waits(tmp_path: Path) -> None:
    sink, agent_side, clock = preview_sink(tmp_path, AgentPreviewSpec(every_s=0.2))
    frames = camera_frames(2)
    sink.write(make_result(0), frames[0])
    taken = agent_side.unsent_previews()[0]
    clock.now += 0.2
    sink.write(make_result(1), frames[1])
    agent_side.preview_sent(taken)
    (waiting,) = agent_side.unsent_previews()
    assert waiting.seq == taken.seq + 1 and waiting.jpeg != taken.jpeg
    sink.close()
    agent_side.close()


def test_preview_when_off_then_no_thumbnail_is_stored(tmp_path: Path) -> None:
    sink, agent_side, _ = preview_sink(tmp_path, None)
    for index, image in enumerate(camera_frames(3)):
        sink.write(make_result(index), image)
    assert agent_side.unsent_previews() == [] and sink.handed == 3 and sink.previews == 0
    assert AgentSinkSpec.model_validate({"type": "agent"}).preview is None, "previews are opt-in"
    sink.close()
    agent_side.close()


def test_preview_when_no_quality_fits_max_bytes_then_skipped_and_counted_and_results_go_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # given a 1024-byte limit and frames of noise, 1280 wide: no JPEG quality gets there
    sink, agent_side, clock = preview_sink(tmp_path, AgentPreviewSpec(width=1280, max_bytes=1024, every_s=0.2))
    noise = np.random.default_rng(0).integers(0, 256, (480, 640, 3), dtype=np.uint8)
    for index in range(3):
        sink.write(make_result(index), noise)
        clock.now += 0.2
    assert agent_side.unsent_previews() == []
    assert sink.thumbnails is not None and sink.thumbnails.too_big == 3 and sink.handed == 3
    assert sum("does not fit in 1024 bytes" in record.message for record in caplog.records) == 1, "logged once"
    sink.close()
    agent_side.close()


def test_preview_when_the_outbox_has_no_previews_table_then_counted_logged_once_and_results_go_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # given an outbox made by an agent that knew no previews
    path = tmp_path / "outbox.sqlite"
    ResultsOutbox(path, create=True).close()
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE previews")
    sink = AgentSink("people", outbox=path, preview=AgentPreviewSpec(every_s=0.2))
    sink.open()
    clock = Clock()
    assert sink.thumbnails is not None
    sink.thumbnails._clock = clock
    for index, image in enumerate(camera_frames(3)):
        sink.write(make_result(index), image)
        clock.now += 0.2
    assert sink.previews_failed == 3 and sink.handed == 3
    assert sum("preview not stored" in record.message for record in caplog.records) == 1
    sink.close()


def test_preview_of_an_update_without_pixels_is_not_made(tmp_path: Path) -> None:
    sink, agent_side, _ = preview_sink(tmp_path, AgentPreviewSpec())
    sink.write_update(make_result(0))
    assert agent_side.unsent_previews() == [] and sink.handed == 1
    sink.close()
    agent_side.close()


@pytest.mark.parametrize(
    ("preview", "expected"),
    [
        ("{width: 5}", r"p\.yaml:8: key 'sinks\.0\.preview\.width': .*greater than or equal to 32, got 5"),
        ("{every_s: 0}", r"p\.yaml:8: key 'sinks\.0\.preview\.every_s': .*greater than or equal to 0\.2, got 0"),
        ("{max_bytes: 100000}", r"preview\.max_bytes': .*less than or equal to 65536"),
        ("{height: 10}", r"preview\.height'"),
    ],
)
def test_preview_when_settings_are_out_of_range_then_a_config_error_names_the_line_and_key(
    tmp_path: Path, preview: str, expected: str
) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(
        f"""name: people
model: {{path: classifier.onnx}}
preprocess: {{resize: [8, 8], layout: nchw, dtype: float32}}
sources: [{{uri: "synthetic://?frames=5&size=16x16", name: cam}}]
postprocess: {{type: classification, output: logits}}
sinks:
  - type: agent
    preview: {preview}
"""
    )
    with pytest.raises(ConfigError, match=expected):
        load_pipeline(path)


def test_preview_limit_is_the_wires() -> None:
    assert MAX_PREVIEW_BYTES == telemetry.MAX_PREVIEW_BYTES
