"""Live sources through real OpenCV: RTSP against a private server, V4L2 and GStreamer on this host.

The RTSP server (tests/sources/rtsp_server.py) only speaks RTP over UDP, so these URLs say
transport=udp; the default TCP transport is covered by the option tests below.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from edge_sdk.core.errors import ConfigError, SourceError
from edge_sdk.core.opencv import has_gstreamer, import_cv2
from edge_sdk.core.results import Frame
from edge_sdk.core.status import StatusEvent, StatusKind
from edge_sdk.sources.gstreamer import GStreamerSource, nvargus_pipeline
from edge_sdk.sources.reconnecting import ReconnectingSource, SourceState, StopSignal
from edge_sdk.sources.registry import create_source
from edge_sdk.sources.rtsp import FFMPEG_OPTIONS_ENV, RtspSource, ffmpeg_capture_options, redact_url
from edge_sdk.sources.spec import ReconnectSpec, SourceSpec
from edge_sdk.sources.v4l2 import V4L2Source

from .rtsp_server import RtspServer, free_tcp_port

pytestmark = pytest.mark.slow  # multi-process runs or subprocesses: not in make test-fast

VIDEO_SHAPE = (240, 320, 3)  # the small_video fixture the server publishes
QUICK_RETRY = ReconnectSpec(initial_delay=0.2, max_delay=1.0, max_attempts=40, jitter=0.0)
"""Fast enough for a test, and bounded: 40 attempts of at most 1 s."""
TEST_TIMEOUTS = "open_timeout_ms=5000&read_timeout_ms=1000"
MISSING_DEVICE = Path("/dev/video97")


def kinds(events: list[StatusEvent]) -> list[StatusKind]:
    return [e.kind for e in events]


def read_until_reconnected(source: ReconnectingSource, events: list[StatusEvent], more: int) -> list[Frame]:
    """Every frame read until `more` frames have arrived after SOURCE_RECONNECTED (bounded)."""
    frames: list[Frame] = []
    after = 0
    for _ in range(2000):
        frame = source.read()
        assert frame is not None, f"a live source keeps delivering frames; events so far: {kinds(events)}"
        frames.append(frame)
        if StatusKind.SOURCE_RECONNECTED in kinds(events):
            after += 1
            if after == more:
                return frames
    raise AssertionError(f"no reconnection within 2000 frames; events: {kinds(events)}")


def on_first(
    kind: StatusKind, action: Callable[[], object], events: list[StatusEvent], failures: list[BaseException]
) -> tuple[Callable[[StatusEvent], None], list[threading.Thread]]:
    """A status callback that records events and runs `action` in a thread the first time `kind` comes."""
    threads: list[threading.Thread] = []

    def run() -> None:
        try:
            action()
        except BaseException as error:
            failures.append(error)

    def callback(event: StatusEvent) -> None:
        events.append(event)
        if event.kind is kind and not threads:
            threads.append(threading.Thread(target=run, daemon=True))
            threads[0].start()

    return callback, threads


def assert_lost_then_reconnected(events: list[StatusEvent]) -> None:
    seen = kinds(events)
    assert seen[0] is StatusKind.SOURCE_CONNECTED, f"the stream was first reported connected: {seen}"
    lost = seen.index(StatusKind.SOURCE_LOST)
    back = seen.index(StatusKind.SOURCE_RECONNECTED)
    assert seen.count(StatusKind.SOURCE_LOST) == 1 and seen.count(StatusKind.SOURCE_RECONNECTED) == 1, (
        f"one outage is reported as one loss and one recovery: {seen}"
    )
    between = events[lost + 1 : back]
    assert between and all(e.kind is StatusKind.SOURCE_RECONNECTING for e in between), (
        f"between LOST and RECONNECTED there are only RECONNECTING events: {seen}"
    )
    assert [e.data["attempt"] for e in between] == list(range(1, len(between) + 1)), "attempts count 1, 2, 3, ..."
    assert events[back].data["attempts"] == len(between), "RECONNECTED says how many attempts it took"


# --- RTSP against a real server ------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_rtsp_source_when_the_server_streams_reads_frames_of_the_published_video(
    rtsp_server: RtspServer, tmp_path: Path
) -> None:
    # given
    events: list[StatusEvent] = []
    spec = SourceSpec(uri=rtsp_server.url(f"transport=udp&{TEST_TIMEOUTS}"))

    # when
    source = create_source(spec, tmp_path, on_status=events.append)
    with source:
        frames = [source.read() for _ in range(10)]

    # then
    assert isinstance(source, ReconnectingSource), "an RTSP source is live and comes back wrapped"
    assert isinstance(source.inner, RtspSource) and source.inner.transport == "udp", "transport=udp was honoured"
    assert "transport" not in source.inner.url, "the SDK's query keys are not sent to the server"
    assert source.name == "cam", "without a name, an RTSP source is named after the stream path"
    assert all(f is not None for f in frames), "a streaming server delivers frames"
    assert [f.meta.index for f in frames if f is not None] == list(range(10)), "indexes count up from 0"
    assert all(f.image.shape == VIDEO_SHAPE for f in frames if f is not None), "frames have the video's size"
    assert kinds(events) == [StatusKind.SOURCE_CONNECTED], "the first frame announces the connection"


@pytest.mark.timeout(90)
def test_reconnecting_source_when_the_rtsp_server_is_killed_and_restarted_resumes_with_increasing_indexes(
    rtsp_server: RtspServer, tmp_path: Path
) -> None:
    # given a source reading the stream, and a server that comes back once the source noticed it went
    events: list[StatusEvent] = []
    failures: list[BaseException] = []
    callback, restarts = on_first(StatusKind.SOURCE_LOST, rtsp_server.start, events, failures)
    spec = SourceSpec(uri=rtsp_server.url(f"transport=udp&{TEST_TIMEOUTS}"), name="door", reconnect=QUICK_RETRY)
    source = create_source(spec, tmp_path, on_status=callback)
    assert isinstance(source, ReconnectingSource)

    with source:
        before = [source.read() for _ in range(5)]
        assert all(f is not None for f in before), "test setup: the stream runs before the crash"

        # when the server dies mid-stream
        rtsp_server.kill()
        during_and_after = read_until_reconnected(source, events, more=5)
    for thread in restarts:
        thread.join(timeout=30)

    # then
    assert not failures, f"test setup: the server restarted: {failures}"
    assert_lost_then_reconnected(events)
    frames = [f for f in before if f is not None] + during_and_after
    indexes = [f.meta.index for f in frames]
    assert indexes == list(range(len(frames))), "indexes keep counting up across the reconnect, no gap, no reset"
    assert all(f.image.shape == VIDEO_SHAPE for f in during_and_after[-5:]), "frames after the restart are video"
    assert all(f.meta.source == "door" for f in frames), "frames keep the source's name"
    assert source.state is SourceState.STREAMING


@pytest.mark.timeout(90)
def test_reconnecting_source_when_the_rtsp_stream_stalls_counts_it_as_lost_and_recovers(
    rtsp_server: RtspServer, tmp_path: Path
) -> None:
    # given a stream whose publisher vanishes while the server stays up: the reader just gets nothing
    events: list[StatusEvent] = []
    failures: list[BaseException] = []
    callback, restarts = on_first(StatusKind.SOURCE_LOST, rtsp_server.restart, events, failures)
    spec = SourceSpec(uri=rtsp_server.url(f"transport=udp&{TEST_TIMEOUTS}"), reconnect=QUICK_RETRY)
    source = create_source(spec, tmp_path, on_status=callback)
    assert isinstance(source, ReconnectingSource)

    with source:
        assert source.read() is not None, "test setup: the stream runs before the stall"

        # when
        rtsp_server.kill_publisher()
        frames = read_until_reconnected(source, events, more=3)
    for thread in restarts:
        thread.join(timeout=30)

    # then
    assert not failures, f"test setup: the server restarted: {failures}"
    assert_lost_then_reconnected(events)
    lost = next(e for e in events if e.kind is StatusKind.SOURCE_LOST)
    assert "no frame" in lost.data["error"], "the loss says no frame came within the read timeout"
    assert [f.meta.index for f in frames] == list(range(1, len(frames) + 1)), "indexes continue after the stall"


@pytest.mark.timeout(60)
def test_create_source_when_rtsp_url_is_never_reachable_reports_failed_and_raises_source_error(
    tmp_path: Path,
) -> None:
    # given a port nobody listens on, and two retries allowed
    url = f"rtsp://viewer:s3cret@127.0.0.1:{free_tcp_port()}/nothing"
    events: list[StatusEvent] = []
    spec = SourceSpec(uri=url, reconnect=ReconnectSpec(initial_delay=0.05, max_delay=0.1, max_attempts=2))
    source = create_source(spec, tmp_path, on_status=events.append)

    # when
    with source, pytest.raises(SourceError) as caught:
        source.read()

    # then
    assert kinds(events) == [
        StatusKind.SOURCE_RECONNECTING,
        StatusKind.SOURCE_RECONNECTING,
        StatusKind.SOURCE_FAILED,
    ], "two announced retries, then FAILED; never 'connected'"
    message = str(caught.value)
    assert "gave up after 2" in message, "the error says the retries are used up"
    assert "127.0.0.1" in message and "/nothing" in message, "the error names the stream"
    assert "s3cret" not in message and all("s3cret" not in str(e) for e in events), "the password never leaks"


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "make_stop",
    [pytest.param(threading.Event, id="threading"), pytest.param(multiprocessing.Event, id="multiprocessing")],
)
def test_reconnecting_source_when_stop_is_set_during_backoff_returns_none_promptly(
    tmp_path: Path, make_stop: Callable[[], StopSignal]
) -> None:
    # given an unreachable camera with a one-minute backoff
    stop = make_stop()
    events: list[StatusEvent] = []
    failures: list[BaseException] = []

    def set_stop_a_moment_later() -> None:
        time.sleep(0.3)
        stop.set()

    callback, setters = on_first(StatusKind.SOURCE_RECONNECTING, set_stop_a_moment_later, events, failures)
    spec = SourceSpec(
        uri=f"rtsp://127.0.0.1:{free_tcp_port()}/nothing", reconnect=ReconnectSpec(initial_delay=60, max_delay=60)
    )
    source = create_source(spec, tmp_path, on_status=callback, stop=stop)

    # when stop is set while the source waits out its backoff
    with source:
        started = time.monotonic()
        frame = source.read()
        waited = time.monotonic() - started
    for thread in setters:
        thread.join(timeout=5)

    # then
    assert frame is None, "a stopped source returns None"
    assert waited < 30, f"stop cut the 60 s backoff short (read returned after {waited:.1f} s)"
    assert kinds(events) == [StatusKind.SOURCE_RECONNECTING], "stopping is not a failure"


def test_rtsp_source_when_opened_leaves_the_ffmpeg_options_as_they_were(monkeypatch: pytest.MonkeyPatch) -> None:
    # given options the user set for other captures
    monkeypatch.setenv(FFMPEG_OPTIONS_ENV, "probesize;32")
    source = RtspSource(f"rtsp://127.0.0.1:{free_tcp_port()}/x", open_timeout_ms=2000)

    # when
    with pytest.raises(SourceError):
        source.open()

    # then
    assert os.environ[FFMPEG_OPTIONS_ENV] == "probesize;32", "the process-wide options are restored after open"


def test_ffmpeg_capture_options_when_other_options_are_set_replaces_only_the_transport() -> None:
    # when / then
    assert ffmpeg_capture_options(None, "tcp") == "rtsp_transport;tcp", "TCP by default"
    assert ffmpeg_capture_options("rtsp_transport;udp|probesize;32", "tcp") == "rtsp_transport;tcp|probesize;32", (
        "the URI's transport wins, other options stay"
    )


def test_create_source_when_rtsp_uri_has_sdk_and_camera_parameters_splits_them(tmp_path: Path) -> None:
    # given
    spec = SourceSpec(uri="rtsps://admin:pw@cam.local:322/cam/realmonitor?channel=1&read_timeout_ms=900&subtype=0")

    # when
    source = create_source(spec, tmp_path)

    # then
    assert isinstance(source, ReconnectingSource) and isinstance(source.inner, RtspSource)
    inner = source.inner
    assert inner.url == "rtsps://admin:pw@cam.local:322/cam/realmonitor?channel=1&subtype=0", (
        "camera parameters reach the camera unchanged, the SDK's are removed"
    )
    assert (inner.transport, inner.read_timeout_ms) == ("tcp", 900), "TCP unless asked otherwise; the timeout is read"
    assert "pw" not in inner.description, "descriptions hide the password"
    assert redact_url(inner.url) == "rtsps://admin:***@cam.local:322/cam/realmonitor?channel=1&subtype=0"


# --- V4L2 ----------------------------------------------------------------------------------------------


def test_v4l2_source_when_device_is_missing_raises_source_error_naming_it() -> None:
    # given
    if MISSING_DEVICE.exists():
        pytest.skip(f"{MISSING_DEVICE} exists on this host")
    source = V4L2Source(str(MISSING_DEVICE))

    # when
    with pytest.raises(SourceError) as caught:
        source.open()

    # then
    assert str(MISSING_DEVICE) in str(caught.value), "the error names the device"
    assert source.is_live, "a camera is live"


@pytest.mark.parametrize("uri", [f"v4l2://{MISSING_DEVICE}", "97"], ids=["path", "bare-index"])
def test_create_source_when_v4l2_device_is_missing_fails_after_max_attempts_naming_it(tmp_path: Path, uri: str) -> None:
    # given
    if MISSING_DEVICE.exists():
        pytest.skip(f"{MISSING_DEVICE} exists on this host")
    events: list[StatusEvent] = []
    spec = SourceSpec(uri=uri, reconnect=ReconnectSpec(initial_delay=0.01, max_delay=0.01, max_attempts=2))

    # when
    source = create_source(spec, tmp_path, on_status=events.append)
    with source, pytest.raises(SourceError) as caught:
        source.read()

    # then
    assert isinstance(source, ReconnectingSource) and isinstance(source.inner, V4L2Source), "v4l2 is live, wrapped"
    assert source.inner.device_path == MISSING_DEVICE, "v4l2:///dev/video97 and a bare 97 name the same device"
    assert kinds(events)[-1] is StatusKind.SOURCE_FAILED, "the wrapper reports FAILED after its attempts"
    assert str(MISSING_DEVICE) in str(caught.value), "the error names the missing device"


# --- GStreamer and Jetson CSI ---------------------------------------------------------------------------


def test_nvargus_pipeline_when_given_a_mode_builds_a_bgr_appsink_pipeline_for_that_sensor() -> None:
    # when
    pipeline = nvargus_pipeline(sensor_id=1, width=1280, height=720, fps=59.94, flip=2)

    # then
    assert pipeline.startswith("nvarguscamerasrc sensor-id=1 !"), "the pipeline starts at the chosen CSI sensor"
    assert "width=(int)1280, height=(int)720" in pipeline, "the requested mode is in the caps"
    assert "framerate=(fraction)2997/50" in pipeline, "fps is written as an exact fraction"
    assert "nvvidconv flip-method=2" in pipeline, "flip goes to the hardware converter"
    assert "format=(string)BGR ! appsink" in pipeline, "OpenCV gets BGR from an appsink"


@pytest.mark.parametrize(
    "uri",
    [
        "csi://0?width=1920&height=1080&fps=30",
        "gst://videotestsrc ! video/x-raw,width=[16,64] ! videoconvert ! appsink",
    ],
    ids=["csi", "gst"],
)
def test_create_source_when_opencv_lacks_gstreamer_raises_source_error_saying_so(tmp_path: Path, uri: str) -> None:
    # given
    if has_gstreamer(import_cv2()):
        pytest.skip("this OpenCV has GStreamer")

    # when
    with pytest.raises(SourceError) as caught:
        create_source(SourceSpec(uri=uri), tmp_path)

    # then
    message = str(caught.value)
    assert "GStreamer" in message and "lacks it" in message, "the error says OpenCV here has no GStreamer"
    assert "JetPack" in message, "the error says where to get an OpenCV that has it"


def test_gstreamer_source_when_pipeline_does_not_end_in_appsink_raises_config_error() -> None:
    # when / then: the pipeline's shape is checked before anything else
    with pytest.raises(ConfigError) as caught:
        GStreamerSource("videotestsrc ! autovideosink")
    assert "appsink" in str(caught.value), "the error says what the pipeline must end with"
