"""Result sinks (JSON Lines, video, stdout), the fan-out that isolates a failing sink, and result types."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from edge_sdk.core.errors import SinkError
from edge_sdk.core.opencv import import_cv2
from edge_sdk.core.results import Classification, Detection, FrameMeta, Result
from edge_sdk.sinks import SinkFanout
from edge_sdk.sinks.base import Sink
from edge_sdk.sinks.jsonl import JsonlSink
from edge_sdk.sinks.stdout import StdoutSink
from edge_sdk.sinks.video import VideoSink

WIDTH, HEIGHT = 160, 120


def make_result(index: int, source: str = "cam") -> Result:
    meta = FrameMeta(source=source, index=index, timestamp=1000.0 + index, width=WIDTH, height=HEIGHT)
    person = Detection(x1=10.0, y1=20.0, x2=60.0, y2=110.0, score=0.87, class_id=0, label="person")
    return Result(frame=meta, detections=(person,), timings_ms={"total": 12.5})


def make_image(index: int) -> np.ndarray:
    image = np.zeros((HEIGHT, WIDTH, 3), dtype=np.uint8)
    image[:, :, 1] = (index * 20) % 256
    return image


def read_lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


class ExplodingSink(Sink):
    """A sink that fails on its n-th write (a full disk, a dropped connection)."""

    def __init__(self, fail_on: int = 1):
        self.name = "exploding"
        self.fail_on = fail_on
        self.writes = 0
        self.closed = False

    def write(self, result: Result, image: np.ndarray) -> None:
        self.writes += 1
        if self.writes >= self.fail_on:
            raise SinkError("disk full")

    def close(self) -> None:
        self.closed = True


# --- JsonlSink ----------------------------------------------------------------------------------------


def test_jsonl_sink_when_results_are_written_stores_one_parseable_line_each(tmp_path: Path) -> None:
    # given a path in a folder that does not exist yet
    path = tmp_path / "out" / "results.jsonl"
    sink = JsonlSink(path)

    # when
    sink.open()
    for index in range(3):
        sink.write(make_result(index), make_image(index))
    sink.close()

    # then
    lines = read_lines(path)
    assert len(lines) == 3, "one line per result"
    assert [line["frame"] for line in lines] == [0, 1, 2], "each line states its frame index, in write order"
    assert all(line["source"] == "cam" for line in lines), "each line states its source"
    first = lines[0]
    assert first["detections"] == [
        {"label": "person", "class_id": 0, "score": 0.87, "box": [10.0, 20.0, 60.0, 110.0]}
    ], "detections are stored with label, class id, score and pixel box"
    assert (first["width"], first["height"]) == (WIDTH, HEIGHT), "each line states the frame size"


def test_jsonl_sink_when_append_is_false_starts_the_file_anew(tmp_path: Path) -> None:
    # given a file from an earlier run
    path = tmp_path / "results.jsonl"
    path.write_text('{"frame": 99}\n{"frame": 100}\n', encoding="utf-8")
    sink = JsonlSink(path, append=False)

    # when
    sink.open()
    sink.write(make_result(0), make_image(0))
    sink.close()

    # then
    assert [line["frame"] for line in read_lines(path)] == [0], "earlier lines are gone"


def test_jsonl_sink_when_append_is_true_keeps_earlier_lines(tmp_path: Path) -> None:
    # given a file from an earlier run
    path = tmp_path / "results.jsonl"
    path.write_text('{"frame": 99}\n', encoding="utf-8")
    sink = JsonlSink(path, append=True)

    # when
    sink.open()
    sink.write(make_result(0), make_image(0))
    sink.close()

    # then
    assert [line["frame"] for line in read_lines(path)] == [99, 0], "new lines go after the earlier ones"


def test_jsonl_sink_when_parent_is_a_regular_file_raises_sink_error_naming_the_path(tmp_path: Path) -> None:
    # given
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder")
    path = blocker / "results.jsonl"

    # when
    with pytest.raises(SinkError) as caught:
        JsonlSink(path).open()

    # then
    assert str(path) in str(caught.value), "the error names the file that cannot be opened"


# --- VideoSink ----------------------------------------------------------------------------------------


def test_video_sink_when_frames_are_written_produces_a_video_opencv_reads_back(tmp_path: Path) -> None:
    # given
    cv2 = import_cv2()
    path = tmp_path / "out" / "annotated.mp4"
    sink = VideoSink(path, fps=10.0)

    # when
    sink.open()
    for index in range(7):
        sink.write(make_result(index), make_image(index))
    sink.close()

    # then
    assert path.is_file(), "the video file exists after close"
    capture = cv2.VideoCapture(str(path))
    assert capture.isOpened(), "OpenCV can open the written video"
    shapes = []
    while True:
        ok, image = capture.read()
        if not ok:
            break
        shapes.append(image.shape)
    capture.release()
    assert len(shapes) == 7, "every written frame is in the video"
    assert set(shapes) == {(HEIGHT, WIDTH, 3)}, "frames keep the size they were written at"


def test_video_sink_when_writing_draws_the_detections_onto_a_copy(tmp_path: Path) -> None:
    # given a black frame
    sink = VideoSink(tmp_path / "annotated.avi", codec="MJPG")
    image = make_image(0)
    untouched = image.copy()

    # when
    sink.open()
    sink.write(make_result(0), image)
    sink.close()

    # then
    assert np.array_equal(image, untouched), "annotating must not change the frame other sinks receive"


# --- StdoutSink ---------------------------------------------------------------------------------------


def test_stdout_sink_when_a_result_is_written_prints_a_line_with_the_label(capsys: pytest.CaptureFixture[str]) -> None:
    # given
    sink = StdoutSink()

    # when
    sink.write(make_result(4, source="porch"), make_image(4))

    # then
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1, "one line per result"
    assert "porch #4" in lines[0], "the line says which source and frame"
    assert "person 0.87" in lines[0], "the line shows the label and score of each detection"


def test_stdout_sink_when_result_has_classes_only_prints_them(capsys: pytest.CaptureFixture[str]) -> None:
    # given
    meta = FrameMeta(source="cam", index=0, timestamp=0.0, width=8, height=8)
    result = Result(frame=meta, classifications=(Classification(2, "tabby", 0.66),))

    # when
    StdoutSink().write(result, make_image(0))

    # then
    assert "tabby 0.66" in capsys.readouterr().out, "classifications are printed when there are no boxes"


def test_stdout_sink_when_every_is_two_prints_every_second_frame(capsys: pytest.CaptureFixture[str]) -> None:
    # given
    sink = StdoutSink(every=2)

    # when
    for index in range(5):
        sink.write(make_result(index), make_image(index))

    # then
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0].split(" ")[1] for line in lines] == ["#0", "#2", "#4"], "frames 0, 2 and 4 only"


# --- SinkFanout ---------------------------------------------------------------------------------------


def test_sink_fanout_when_a_sink_raises_on_write_disables_it_and_the_others_get_every_result(
    tmp_path: Path,
) -> None:
    # given a sink that fails on its second write, next to a JSON Lines sink
    exploding = ExplodingSink(fail_on=2)
    path = tmp_path / "results.jsonl"
    fanout = SinkFanout([exploding, JsonlSink(path)])

    # when
    fanout.open()
    for index in range(5):
        fanout.write(make_result(index), make_image(index))
    fanout.close()

    # then
    assert "exploding" in fanout.failures, "the failing sink is reported by name"
    assert "disk full" in fanout.failures["exploding"], "the report keeps the sink's own error message"
    assert exploding.writes == 2, "a failed sink gets no more results"
    assert exploding.closed, "a failed sink is closed"
    assert [line["frame"] for line in read_lines(path)] == [0, 1, 2, 3, 4], "the healthy sink receives every result"


def test_sink_fanout_when_a_sink_cannot_open_reports_it_and_the_others_still_work(tmp_path: Path) -> None:
    # given a JSON Lines path below a regular file, next to a working one
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder")
    broken = JsonlSink(blocker / "results.jsonl")
    good_path = tmp_path / "good.jsonl"
    fanout = SinkFanout([broken, JsonlSink(good_path)])

    # when
    fanout.open()
    for index in range(3):
        fanout.write(make_result(index), make_image(index))
    fanout.close()

    # then
    assert list(fanout.failures) == [broken.name], "only the sink that could not open is reported"
    assert fanout.failures[broken.name].startswith("open"), "the report says the sink failed to open"
    assert len(read_lines(good_path)) == 3, "the working sink receives every result"


# --- result types -------------------------------------------------------------------------------------


def test_detection_when_x2_is_left_of_x1_raises_value_error_naming_expected_and_got() -> None:
    # given / when
    with pytest.raises(ValueError) as caught:
        Detection(x1=50.0, y1=10.0, x2=20.0, y2=40.0, score=0.9, class_id=0, label="person")

    # then
    message = str(caught.value)
    assert "expected" in message and "got" in message, "the error says what was expected and what came"
    assert "50.0" in message and "20.0" in message, "the error shows the offending coordinates"


def test_detection_when_score_is_above_one_raises_value_error_naming_expected_and_got() -> None:
    # given / when
    with pytest.raises(ValueError) as caught:
        Detection(x1=0.0, y1=0.0, x2=1.0, y2=1.0, score=1.5, class_id=0, label="person")

    # then
    message = str(caught.value)
    assert "expected" in message and "got 1.5" in message, "the error says what was expected and what came"
