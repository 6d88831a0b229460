"""The video sink's encoders: H.264 through PyAV (what browsers play), OpenCV's mp4v when PyAV is
missing or a FourCC is asked for, and the log line that says which. Files are probed with PyAV."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from edge_sdk.core.errors import SinkError
from edge_sdk.core.results import Detection, FrameMeta, Result
from edge_sdk.sinks.video import VideoSinkSpec

av = pytest.importorskip("av", reason="PyAV is in the test extra: pip install -e '.[test]'")


def frames(count: int, width: int = 160, height: int = 120) -> Iterator[tuple[Result, np.ndarray]]:
    for index in range(count):
        image = np.zeros((height, width, 3), np.uint8)
        image[:, : (index * 10) % width, 1] = 200  # a green bar that grows: frames differ
        meta = FrameMeta("cam", index, float(index), width, height)
        yield Result(meta, (Detection(10, 20, 60, 100, 0.9, 0, "person"),)), image


def write_video(path: Path, images: Iterator[tuple[Result, np.ndarray]], **options: object) -> VideoSinkSpec:
    spec = VideoSinkSpec(type="video", path=path, **options)  # type: ignore[arg-type]
    spec.check()
    sink = spec.build("test")
    sink.open()
    for result, image in images:
        sink.write(result, image)
    sink.close()
    return spec


def probe(path: Path) -> dict[str, object]:
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        decoded = [frame.to_ndarray(format="bgr24") for frame in container.decode(stream)]
        return {
            "codec": stream.codec_context.name,
            "pix_fmt": stream.codec_context.pix_fmt,
            "size": (stream.codec_context.width, stream.codec_context.height),
            "rate": float(stream.average_rate),
            "frames": len(decoded),
            "first": decoded[0],
        }


def top_level_boxes(path: Path) -> list[str]:
    """The MP4 file's top-level box types in file order (ftyp, moov, mdat, ...)."""
    data, boxes, offset = path.read_bytes(), [], 0
    while offset + 8 <= len(data):
        size = int.from_bytes(data[offset : offset + 4], "big")
        boxes.append(data[offset + 4 : offset + 8].decode("latin-1"))
        if size == 1:
            size = int.from_bytes(data[offset + 8 : offset + 16], "big")
        if size < 8:
            break
        offset += size
    return boxes


@contextmanager
def pyav_missing(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """As on a box without PyAV: `import av` fails and importlib finds no spec for it."""
    with monkeypatch.context() as patch:
        patch.setitem(sys.modules, "av", None)
        yield


def test_video_sink_by_default_writes_h264_in_yuv420p_with_the_index_first_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # when
    with caplog.at_level(logging.INFO, logger="edge_sdk.sinks.video"):
        write_video(tmp_path / "annotated.mp4", frames(12), fps=12.5)

    # then
    found = probe(tmp_path / "annotated.mp4")
    assert found["codec"] == "h264" and found["pix_fmt"] == "yuv420p", found
    assert found["size"] == (160, 120) and found["frames"] == 12 and found["rate"] == 12.5
    boxes = top_level_boxes(tmp_path / "annotated.mp4")
    assert boxes.index("moov") < boxes.index("mdat"), f"+faststart puts the index first: {boxes}"
    first = found["first"]
    assert isinstance(first, np.ndarray) and first[20:100, 10, 2].mean() > 150, "the box is drawn (red edge)"
    said = [r.getMessage() for r in caplog.records]
    assert any("H.264 (libx264 through PyAV)" in line for line in said), said


def test_video_sink_h264_of_an_odd_size_loses_the_last_row_and_column_and_frames_of_another_size_are_resized(
    tmp_path: Path,
) -> None:
    # given 3 frames of 161x121, then 2 of 320x240
    def mixed() -> Iterator[tuple[Result, np.ndarray]]:
        yield from frames(3, 161, 121)
        yield from frames(2, 320, 240)

    # when
    write_video(tmp_path / "odd.mp4", mixed())

    # then
    found = probe(tmp_path / "odd.mp4")
    assert found["codec"] == "h264" and found["size"] == (160, 120) and found["frames"] == 5


def test_video_sink_without_pyav_falls_back_to_opencv_mp4v_with_one_line_saying_how_to_get_h264(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # when
    with pyav_missing(monkeypatch), caplog.at_level(logging.INFO, logger="edge_sdk.sinks.video"):
        write_video(tmp_path / "annotated.mp4", frames(7))

    # then
    found = probe(tmp_path / "annotated.mp4")
    assert found["codec"] == "mpeg4" and found["frames"] == 7 and found["size"] == (160, 120)
    fallback = [r for r in caplog.records if "edge-sdk[video]" in r.getMessage()]
    assert len(fallback) == 1 and fallback[0].levelno == logging.INFO, [r.getMessage() for r in caplog.records]
    assert "PyAV is not installed" in fallback[0].getMessage() and "browsers do not play" in fallback[0].getMessage()


def test_video_sink_codec_h264_without_pyav_is_one_error_before_the_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = VideoSinkSpec(type="video", path=tmp_path / "a.mp4", codec="h264")
    with pyav_missing(monkeypatch), pytest.raises(SinkError) as raised:
        spec.check()
    problem = str(raised.value)
    assert "\n" not in problem and "PyAV is not installed" in problem and "codec: mp4v" in problem


@pytest.mark.parametrize(("name", "codec", "expected"), [("a.mp4", "mp4v", "mpeg4"), ("a.avi", "auto", "mpeg4")])
def test_video_sink_a_fourcc_or_a_non_mp4_file_keeps_opencvs_writer(
    tmp_path: Path, name: str, codec: str, expected: str
) -> None:
    write_video(tmp_path / name, frames(4), codec=codec)
    found = probe(tmp_path / name)
    assert found["codec"] == expected and found["frames"] == 4


def test_video_sink_restarted_continues_in_a_new_h264_part(tmp_path: Path) -> None:
    spec = VideoSinkSpec(type="video", path=tmp_path / "annotated.mp4").after_restart(1)
    write_video(spec.path, frames(3))
    assert probe(tmp_path / "annotated.part1.mp4")["codec"] == "h264"
