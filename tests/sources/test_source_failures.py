"""Sources that fail or hold damaged frames, on real files: a missing or truncated video, a missing or
empty folder, a corrupt JPEG, a video whose tail or middle cannot be read, a malformed URI.

A cause no retry can fix is one PermanentSourceError line (retryable False); a damaged frame is
skipped, counted and reported under `on_error: skip` and stops the source under `stop`.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from edge_sdk.core.errors import ConfigError, PermanentSourceError, SourceError
from edge_sdk.core.opencv import import_cv2
from edge_sdk.core.results import Frame
from edge_sdk.core.status import StatusEvent, StatusKind
from edge_sdk.sources.base import Source
from edge_sdk.sources.reconnecting import ReconnectingSource, SourceState
from edge_sdk.sources.registry import create_source
from edge_sdk.sources.rtsp import RtspSource
from edge_sdk.sources.spec import ReconnectSpec, SourceSpec

from .rtsp_server import find_ffmpeg

VIDEO_FRAMES = 300
VIDEO_SIZE = (160, 120)
JPEGS = 5


def noise_frames(count: int, seed: int = 7) -> list[np.ndarray]:
    """Random pictures: they compress badly, so every frame has many bytes to cut into."""
    rng = np.random.default_rng(seed)
    width, height = VIDEO_SIZE
    return [rng.integers(0, 256, (height, width, 3), dtype=np.uint8) for _ in range(count)]


def write_mp4(path: Path, frames: int = VIDEO_FRAMES) -> Path:
    """A real mp4 written by cv2.VideoWriter (its index, the moov box, comes last)."""
    cv2 = import_cv2()
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 30.0, VIDEO_SIZE)
    assert writer.isOpened(), "test setup: OpenCV must write mp4v"
    for image in noise_frames(frames):
        writer.write(image)
    writer.release()
    return path


def truncate(path: Path, fraction: float) -> Path:
    with open(path, "r+b") as file:
        file.truncate(int(path.stat().st_size * fraction))
    return path


def read_all(source: Source) -> list[Frame]:
    with source:
        return list(source)


def what_opencv_reads(path: Path, announced: int) -> tuple[int, list[int]]:
    """Ground truth from OpenCV itself: frames it decodes, and the positions of failed reads before
    the announced end."""
    capture = import_cv2().VideoCapture(str(path))
    decoded, failed = 0, []
    for position in range(announced):
        ok, _ = capture.read()
        if ok:
            decoded += 1
        else:
            failed.append(position)
    capture.release()
    return decoded, failed


@pytest.fixture(scope="module")
def streamable_mp4(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """300 frames with the index first (ffmpeg -movflags +faststart, as cameras and encoders write
    files meant to be read while they grow): truncating it keeps a file that opens."""
    ffmpeg = find_ffmpeg()
    if ffmpeg is None:
        pytest.skip("needs the ffmpeg binary from imageio-ffmpeg (pip install -e '.[test]')")
    folder = tmp_path_factory.mktemp("videos")
    written = write_mp4(folder / "written.mp4")
    streamable = folder / "streamable.mp4"
    subprocess.run(
        [
            ffmpeg,
            "-y",
            "-loglevel",
            "error",
            "-i",
            str(written),
            "-c",
            "copy",
            "-movflags",
            "+faststart",
            str(streamable),
        ],
        check=True,
        timeout=60,
    )
    return streamable


@pytest.fixture
def truncated_mp4(streamable_mp4: Path, tmp_path: Path) -> Path:
    """The streamable video cut at half its size: it opens, announces 300 frames and breaks midway."""
    path = tmp_path / "truncated.mp4"
    path.write_bytes(streamable_mp4.read_bytes())
    return truncate(path, 0.5)


@pytest.fixture
def jpeg_folder(tmp_path: Path) -> Path:
    """Five real JPEGs (a.jpg .. e.jpg) and one corrupt file of random bytes sorted between them."""
    cv2 = import_cv2()
    folder = tmp_path / "shelf"
    folder.mkdir()
    for name, image in zip("abcde", noise_frames(JPEGS), strict=True):
        assert cv2.imwrite(str(folder / f"{name}.jpg"), image), "test setup: OpenCV must write the JPEG"
    (folder / "c-corrupt.jpg").write_bytes(np.random.default_rng(3).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    return folder


def skipped_events(events: list[StatusEvent]) -> list[StatusEvent]:
    return [e for e in events if e.kind is StatusKind.FRAMES_SKIPPED]


# --- a source that cannot be opened: one permanent SourceError line ---------------------------------------


def _missing_file(tmp_path: Path) -> tuple[str, str]:
    return str(tmp_path / "no-such-clip.mp4"), "no-such-clip.mp4"


def _truncated_before_index(tmp_path: Path) -> tuple[str, str]:
    path = truncate(write_mp4(tmp_path / "cut.mp4", frames=30), 0.5)
    return str(path), "cut.mp4"


def _random_bytes_mp4(tmp_path: Path) -> tuple[str, str]:
    path = tmp_path / "noise.mp4"
    path.write_bytes(np.random.default_rng(5).integers(0, 256, 8192, dtype=np.uint8).tobytes())
    return str(path), "noise.mp4"


def _folder_as_video(tmp_path: Path) -> tuple[str, str]:
    (tmp_path / "clips").mkdir()
    return str(tmp_path / "clips"), "clips"


def _missing_folder(tmp_path: Path) -> tuple[str, str]:
    return f"images://{tmp_path / 'no-such-folder'}", "no-such-folder"


def _empty_folder(tmp_path: Path) -> tuple[str, str]:
    (tmp_path / "empty").mkdir()
    return f"images://{tmp_path / 'empty'}", "empty"


def _only_corrupt_images(tmp_path: Path) -> tuple[str, str]:
    folder = tmp_path / "broken"
    folder.mkdir()
    for name in ("a.jpg", "b.png"):
        (folder / name).write_bytes(b"\xff\xd8 not really an image" * 20)
    return f"images://{folder}", "broken"


def _rtsp_port_not_a_number(tmp_path: Path) -> tuple[str, str]:
    return "rtsp://cam.local:80a/live", "port"


def _rtsp_port_out_of_range(tmp_path: Path) -> tuple[str, str]:
    return "rtsp://admin:s3cret@cam.local:99999/live", "port"


def _file_given_as_camera(tmp_path: Path) -> tuple[str, str]:
    clip = write_mp4(tmp_path / "clip.mp4", frames=5)
    return f"v4l2://{clip}", "not a camera device"


@pytest.mark.parametrize(
    "make",
    [
        _missing_file,
        _truncated_before_index,
        _random_bytes_mp4,
        _folder_as_video,
        _missing_folder,
        _empty_folder,
        _only_corrupt_images,
        _rtsp_port_not_a_number,
        _rtsp_port_out_of_range,
        _file_given_as_camera,
    ],
    ids=lambda make: make.__name__.strip("_").replace("_", "-"),
)
def test_source_when_it_cannot_deliver_a_frame_raises_one_permanent_source_error_line(
    tmp_path: Path, make: Callable[[Path], tuple[str, str]]
) -> None:
    # given a source whose cause no retry can fix (an attempt budget that would show a retry)
    uri, named = make(tmp_path)
    events: list[StatusEvent] = []
    spec = SourceSpec(uri=uri, reconnect=ReconnectSpec(initial_delay=0.01, max_delay=0.01, max_attempts=3))

    # when it is made, opened and read
    with pytest.raises(SourceError) as caught:
        source = create_source(spec, tmp_path, on_status=events.append)
        with source:
            source.read()

    # then
    error = caught.value
    message = str(error)
    assert isinstance(error, PermanentSourceError), f"the error is a permanent one, got {type(error).__name__}"
    assert error.retryable is False, "the error says a retry cannot help"
    assert "\n" not in message, f"the error is one line: {message!r}"
    assert named in message, f"the error names the source or its cause ({named!r}): {message!r}"
    assert "s3cret" not in message, "a password in the URI never shows"
    assert not [e for e in events if e.kind is StatusKind.SOURCE_RECONNECTING], "a permanent cause is not retried"


def test_create_source_when_uri_is_malformed_raises_an_error_that_is_a_config_and_a_source_error(
    tmp_path: Path,
) -> None:
    # when
    with pytest.raises(SourceError) as caught:
        create_source(SourceSpec(uri="csi://front"), tmp_path)

    # then
    assert isinstance(caught.value, ConfigError), "a malformed URI is still a config error for the CLI and loaders"
    assert not caught.value.retryable, "and one no retry can fix"


def test_rtsp_source_when_nobody_listens_raises_a_retryable_source_error() -> None:
    # given a port on this host that refuses connections (nothing listens on port 1 without root)
    source = RtspSource("rtsp://127.0.0.1:1/nothing", open_timeout_ms=2000)

    # when
    with pytest.raises(SourceError) as caught:
        source.open()

    # then
    assert caught.value.retryable, "an unreachable camera may come back: a retry can help"
    assert "\n" not in str(caught.value) and "127.0.0.1:1" in str(caught.value), "one line naming the stream"


def test_reconnecting_source_when_inner_cause_is_permanent_fails_at_once_without_retrying(tmp_path: Path) -> None:
    # given a regular file given as a camera, with retries allowed forever
    clip = write_mp4(tmp_path / "clip.mp4", frames=5)
    events: list[StatusEvent] = []
    source = create_source(SourceSpec(uri=f"v4l2://{clip}"), tmp_path, on_status=events.append)
    assert isinstance(source, ReconnectingSource), "test setup: a v4l2 source is wrapped in its reconnect policy"

    # when
    with pytest.raises(PermanentSourceError) as caught:
        source.open()

    # then
    assert [e.kind for e in events] == [StatusKind.SOURCE_FAILED], "one FAILED event, no reconnect attempt"
    assert source.state is SourceState.FAILED, "the source stays failed"
    assert "source clip" in str(caught.value), "the error names the source"
    with pytest.raises(PermanentSourceError):
        source.read()  # and a later read says so again instead of retrying


class BreaksForGood(Source):
    """A live stand-in that delivers two frames, then fails in a way no reconnect can fix."""

    name = "breaks"
    is_live = True

    def __init__(self) -> None:
        self.opens = 0
        self.delivered = 0

    def open(self) -> None:
        self.opens += 1

    def read(self) -> Frame | None:
        if self.delivered == 2:
            raise PermanentSourceError("the stream switched to a codec this OpenCV cannot decode")
        self.delivered += 1
        return self._stamp(np.zeros((4, 6, 3), dtype=np.uint8))

    def close(self) -> None:
        pass


def test_reconnecting_source_when_a_read_fails_permanently_reports_failed_without_reconnecting() -> None:
    # given
    inner = BreaksForGood()
    events: list[StatusEvent] = []
    source = ReconnectingSource(inner, on_status=events.append)

    # when
    with source, pytest.raises(PermanentSourceError) as caught:
        while source.read() is not None:
            pass

    # then
    assert [e.kind for e in events] == [StatusKind.SOURCE_CONNECTED, StatusKind.SOURCE_FAILED], (
        "connected, then failed: no loss-and-reconnect cycle for a permanent cause"
    )
    assert inner.opens == 1, "the source is not opened again"
    assert str(caught.value).startswith("source breaks: ") and "codec" in str(caught.value), "names source and cause"


# --- a corrupt image in a folder -------------------------------------------------------------------------


def test_image_folder_source_when_one_jpeg_is_corrupt_skips_counts_and_reports_it(jpeg_folder: Path) -> None:
    # given
    events: list[StatusEvent] = []
    source = create_source(SourceSpec(uri=f"images://{jpeg_folder}"), jpeg_folder.parent, on_status=events.append)

    # when
    frames = read_all(source)

    # then
    assert len(frames) == JPEGS, "every good image is read: the corrupt one does not end the folder"
    assert [f.meta.index for f in frames] == list(range(JPEGS)), "frame indexes have no gap where the image was"
    assert source.frames_skipped == 1, "the corrupt image is counted"
    (event,) = skipped_events(events)
    assert event.subject == "shelf", "the event names the source"
    assert event.data["path"] == str(jpeg_folder / "c-corrupt.jpg"), "the event names the file"
    assert "c-corrupt.jpg" in event.message and "cannot be decoded" in event.message, "the message says which and why"
    assert event.data["frames"] == 1 and event.data["total"] == 1, "the event carries this skip and the total"


def test_image_folder_source_when_looping_counts_a_corrupt_image_once(jpeg_folder: Path) -> None:
    # given
    events: list[StatusEvent] = []
    spec = SourceSpec(uri=f"images://{jpeg_folder}", loop=True)
    source = create_source(spec, jpeg_folder.parent, on_status=events.append)

    # when three passes are read
    with source:
        frames = [source.read() for _ in range(3 * JPEGS)]

    # then
    assert all(f is not None for f in frames), "a looping folder keeps going past the corrupt image"
    assert source.frames_skipped == 1 and len(skipped_events(events)) == 1, "the corrupt image is reported once"


def test_image_folder_source_when_on_error_is_stop_delivers_the_images_before_it_then_raises_naming_it(
    jpeg_folder: Path,
) -> None:
    # given
    spec = SourceSpec(uri=f"images://{jpeg_folder}", on_error="stop")
    source = create_source(spec, jpeg_folder.parent)
    frames: list[Frame] = []

    # when
    with source, pytest.raises(SourceError) as caught:
        while (frame := source.read()) is not None:
            frames.append(frame)

    # then
    assert len(frames) == 2, "a.jpg and b.jpg come before c-corrupt.jpg ('-' sorts before '.')"
    assert "c-corrupt.jpg" in str(caught.value) and "on_error: stop" in str(caught.value), "the error names it"
    assert not caught.value.retryable, "reading the same corrupt file again cannot help"
    assert source.frames_skipped == 0, "nothing was skipped"


# --- a video that breaks -----------------------------------------------------------------------------------


def test_video_file_source_when_mp4_is_truncated_reads_the_frames_before_the_break_then_ends_with_count_and_event(
    truncated_mp4: Path,
) -> None:
    # given what OpenCV can decode of the cut file
    readable, failed = what_opencv_reads(truncated_mp4, VIDEO_FRAMES)
    assert 0 < readable < VIDEO_FRAMES and failed == list(range(readable, VIDEO_FRAMES)), (
        "test setup: the cut file decodes up to a point, then nothing"
    )
    events: list[StatusEvent] = []
    source = create_source(SourceSpec(uri=str(truncated_mp4)), truncated_mp4.parent, on_status=events.append)

    # when
    frames = read_all(source)

    # then
    assert len(frames) == readable, "every frame before the break is delivered"
    assert source.frames_skipped == VIDEO_FRAMES - readable, "the unread tail counts as skipped"
    (event,) = skipped_events(events)
    assert event.message == (
        f"video ended at frame {readable} of {VIDEO_FRAMES} (unreadable tail): {VIDEO_FRAMES - readable} frames skipped"
    ), "the event says where the video ended and how much was lost"
    assert event.data["reason"] == "unreadable tail" and event.data["frame"] == readable


def test_video_file_source_when_mp4_is_truncated_and_on_error_is_stop_raises_naming_the_frame(
    truncated_mp4: Path,
) -> None:
    # given
    readable, _ = what_opencv_reads(truncated_mp4, VIDEO_FRAMES)
    source = create_source(SourceSpec(uri=str(truncated_mp4), on_error="stop"), truncated_mp4.parent)
    frames: list[Frame] = []

    # when
    with source, pytest.raises(SourceError) as caught:
        while (frame := source.read()) is not None:
            frames.append(frame)

    # then
    assert len(frames) == readable, "the frames before the break are delivered"
    message = str(caught.value)
    assert f"frame {readable} of {VIDEO_FRAMES}" in message and "truncated.mp4" in message, "names the frame"
    assert not caught.value.retryable, "the same file breaks at the same frame on every try"


def test_video_file_source_when_a_truncated_mp4_loops_counts_the_tail_once_and_starts_again(
    truncated_mp4: Path,
) -> None:
    # given
    readable, _ = what_opencv_reads(truncated_mp4, VIDEO_FRAMES)
    events: list[StatusEvent] = []
    spec = SourceSpec(uri=str(truncated_mp4), loop=True)
    source = create_source(spec, truncated_mp4.parent, on_status=events.append)

    # when two passes and a bit are read
    with source:
        frames = [source.read() for _ in range(2 * readable + 5)]

    # then
    assert all(f is not None for f in frames), "a looping video starts again after its broken tail"
    assert source.frames_skipped == VIDEO_FRAMES - readable, "the tail is counted once, not on every pass"
    assert len(skipped_events(events)) == 1, "and reported once"


def test_video_file_source_when_frames_in_the_middle_are_damaged_skips_them_and_reads_on(
    streamable_mp4: Path, tmp_path: Path
) -> None:
    # given the streamable video with a stretch of its frame data zeroed in the middle
    data = bytearray(streamable_mp4.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 20_000] = bytes(20_000)
    damaged = tmp_path / "damaged.mp4"
    damaged.write_bytes(bytes(data))
    decoded, failed = what_opencv_reads(damaged, VIDEO_FRAMES)
    assert failed and max(failed) < VIDEO_FRAMES - 10, "test setup: some frames in the middle fail to decode"
    events: list[StatusEvent] = []

    # when
    source = create_source(SourceSpec(uri=str(damaged)), tmp_path, on_status=events.append)
    frames = read_all(source)

    # then
    assert len(frames) == decoded, "every frame OpenCV can decode is delivered, also those after the damage"
    assert source.frames_skipped == len(failed), "each frame that failed is counted"
    assert sum(e.data["frames"] for e in skipped_events(events)) == len(failed), "and reported"
    assert all("cannot be decoded" in e.message for e in skipped_events(events)), "the events say why"


def test_video_file_source_when_the_video_ends_normally_skips_nothing(streamable_mp4: Path) -> None:
    # given
    events: list[StatusEvent] = []
    source = create_source(SourceSpec(uri=str(streamable_mp4)), streamable_mp4.parent, on_status=events.append)

    # when
    frames = read_all(source)

    # then
    assert len(frames) == VIDEO_FRAMES, "an intact video gives every frame"
    assert source.frames_skipped == 0 and not skipped_events(events), "and nothing is reported skipped"


def test_create_source_when_max_frames_wraps_a_source_passes_its_skipped_count_through(jpeg_folder: Path) -> None:
    # given
    source = create_source(SourceSpec(uri=f"images://{jpeg_folder}", max_frames=JPEGS), jpeg_folder.parent)

    # when
    frames = read_all(source)

    # then
    assert len(frames) == JPEGS, "max_frames counts delivered frames, not skipped ones"
    assert source.frames_skipped == 1, "the wrapper reports the inner source's count"
