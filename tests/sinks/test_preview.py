"""The preview sink over plain HTTP: the page, the MJPEG stream, the stats, viewers that stall, the
port already in use, and a close that leaves nothing behind. The browser test is test_preview_browser.py."""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from pydantic import TypeAdapter, ValidationError

from edge_sdk.core.errors import SinkError
from edge_sdk.core.opencv import import_cv2
from edge_sdk.core.results import Detection, FrameMeta, Result
from edge_sdk.engines.cache import EngineCache
from edge_sdk.pipeline.config import load_pipeline
from edge_sdk.pipeline.metrics import RunSummary
from edge_sdk.pipeline.run import run_pipeline
from edge_sdk.profiles import DeviceProfile
from edge_sdk.sinks import SinkSpec
from edge_sdk.sinks.preview import (
    PreviewSink,
    PreviewSinkSpec,
    free_port,
    open_in_browser,
    preview_url,
    wait_for_preview,
)
from tests.support.waits import wait_until
from tools.harness.onnx_models import float_classifier

from ..conftest import ASTRONAUT

WIDTH, HEIGHT = 320, 240
EDGE_SDK = str(Path(sys.executable).with_name("edge-sdk"))


def preview_spec(**options: object) -> PreviewSinkSpec:
    spec = TypeAdapter(SinkSpec).validate_python({"type": "preview", "port": 0, **options})
    assert isinstance(spec, PreviewSinkSpec)
    return spec


def frame(index: int, source: str = "cam") -> tuple[Result, np.ndarray]:
    """A frame whose pixels change with `index` (noise, so its JPEG is large), with one detection."""
    pixels = np.random.default_rng(index).integers(0, 255, (HEIGHT, WIDTH, 3), dtype=np.uint8)
    meta = FrameMeta(source, index, 1000.0 + index, WIDTH, HEIGHT)
    person = Detection(40, 30, 200, 220, 0.9, 0, "person")
    return Result(meta, (person,), timings_ms={"total": 40.0 + index % 3, "infer": 12.0}), pixels


@pytest.fixture
def sink() -> Iterator[PreviewSink]:
    preview = preview_spec(max_fps=120.0).build("people")
    preview.open()
    yield preview
    preview.close()


def get_json(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url, timeout=5) as response:
        data: dict[str, object] = json.loads(response.read())
        return data


class MjpegReader:
    """A viewer of /stream.mjpg that reads it part by part, as a browser does."""

    def __init__(self, sink: PreviewSink):
        self.connection = http.client.HTTPConnection("127.0.0.1", sink.port, timeout=5)
        self.connection.request("GET", "/stream.mjpg")
        self.response = self.connection.getresponse()

    def next_jpeg(self) -> bytes:
        stream = self.response
        line = stream.readline()
        while line.strip() in (b"", b"--frame"):
            line = stream.readline()
        headers = {}
        while line.strip():
            name, _, value = line.decode().partition(":")
            headers[name.strip().lower()] = value.strip()
            line = stream.readline()
        assert headers["content-type"] == "image/jpeg"
        return stream.read(int(headers["content-length"]))

    def close(self) -> None:
        self.response.close()  # the response holds the socket open until it is closed too
        self.connection.close()


def write_while(sink: PreviewSink, until: threading.Event, start: int = 0, pause_s: float = 0.01) -> int:
    index = start
    while not until.is_set():
        sink.write(*frame(index))
        index += 1
        time.sleep(pause_s)
    return index


def test_preview_when_a_viewer_watches_streams_the_annotated_frames_as_valid_changing_jpegs(
    sink: PreviewSink,
) -> None:
    # given a viewer on the stream
    viewer = MjpegReader(sink)
    assert viewer.response.status == 200
    assert viewer.response.getheader("Content-Type") == "multipart/x-mixed-replace; boundary=frame"
    wait_until(lambda: sink.stats()["viewers"] == 1, timeout=5, what="the viewer to join")

    # when frames flow
    stop = threading.Event()
    writer = threading.Thread(target=write_while, args=(sink, stop))
    writer.start()
    try:
        jpegs = [viewer.next_jpeg() for _ in range(3)]
    finally:
        stop.set()
        writer.join()
        viewer.close()

    # then each part is a JPEG of the frame's size, with the box drawn, and they differ
    cv2 = import_cv2()
    images = [cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR) for jpeg in jpegs]
    assert all(image is not None and image.shape == (HEIGHT, WIDTH, 3) for image in images)
    assert len(set(jpegs)) == 3, "the stream moves on: every part is a new frame"
    label = images[0][18:29, 41:130].astype(int)  # the caption's box above the detection, in its class colour
    assert np.median(label[..., 2] - label[..., 0]) > 120, "the detection is drawn on the frame (red caption box)"


def test_preview_page_and_stats_say_frames_fps_and_latency_from_the_results(sink: PreviewSink) -> None:
    # when 20 frames arrive at about 50 a second, and one of another source
    for index in range(20):
        sink.write(*frame(index))
        time.sleep(0.02)
    sink.write(*frame(0, source="door"))

    # then
    with urllib.request.urlopen(sink.url, timeout=5) as response:
        page = response.read().decode()
        assert response.headers["Content-Type"].startswith("text/html")
    assert "stream.mjpg" in page and "stats.json" in page
    stats = get_json(sink.url + "stats.json")
    assert stats["source"] == "cam" and stats["frames"] == 20, "the first source's frames are shown, others not"
    assert 20 < float(stats["fps"]) < 60, stats  # type: ignore[arg-type]
    assert 40.0 <= float(stats["latency_ms"]) <= 42.0 and stats["infer_ms"] == 12.0, stats  # type: ignore[arg-type]
    assert stats["size"] == [WIDTH, HEIGHT] and stats["encoded"] == 0, "nobody watched: nothing was encoded"
    time.sleep(2.1)
    stalled = get_json(sink.url + "stats.json")
    assert stalled["fps"] == 0.0 and stalled["latency_ms"] is None, "no frame for 2 s reads as 0 FPS, not the last rate"
    with pytest.raises(urllib.error.HTTPError, match="404"):
        urllib.request.urlopen(sink.url + "nothing-here", timeout=5)


def test_preview_when_a_viewer_never_reads_the_pipeline_does_not_wait_and_its_missed_frames_are_counted(
    sink: PreviewSink, caplog: pytest.LogCaptureFixture
) -> None:
    # given a viewer that asks for the stream and never reads it (a tiny receive buffer fills at once)
    stuck = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stuck.connect(("127.0.0.1", sink.port))
    stuck.sendall(b"GET /stream.mjpg HTTP/1.1\r\nHost: preview\r\n\r\n")
    wait_until(lambda: sink.stats()["viewers"] == 1, timeout=5, what="the stuck viewer to join")

    # when 150 frames (about 100 KB of JPEG each) are written, and a second viewer reads along
    reader = MjpegReader(sink)
    slowest = 0.0
    received: list[bytes] = []
    reading = threading.Thread(target=lambda: received.extend(reader.next_jpeg() for _ in range(5)))
    reading.start()
    for index in range(150):
        started = time.perf_counter()
        sink.write(*frame(index))
        slowest = max(slowest, time.perf_counter() - started)
        time.sleep(0.01)
    reading.join(10)
    stats = get_json(sink.url + "stats.json")

    # then no write waited on the stuck viewer, the other viewer got frames, and the drops are counted
    # a write that waited on the stuck viewer would wait until its socket timed out (30 s)
    assert slowest < 1.0, f"a write took {slowest * 1000:.0f} ms"
    assert len(received) == 5, "a stuck viewer does not hold back the other ones"
    assert int(stats["dropped"]) >= 50, stats  # type: ignore[call-overload]
    assert stats["viewers"] == 2
    with caplog.at_level(logging.INFO, logger="edge_sdk.sinks.preview"):
        reader.close()
        sink.close()
        stuck.close()
    closing = [r for r in caplog.records if "closed" in r.getMessage()]
    assert len(closing) == 1 and closing[0].levelno == logging.WARNING, "the drops are said when the sink closes"
    said = re.search(r"(\d+) dropped for slow viewers", closing[0].getMessage())
    assert said and int(said.group(1)) >= int(stats["dropped"]), closing[0].getMessage()  # type: ignore[call-overload]


def test_preview_when_a_viewer_disconnects_mid_stream_it_is_let_go_and_the_next_one_is_served(
    sink: PreviewSink,
) -> None:
    # given a viewer that took one frame and closed the tab
    stop = threading.Event()
    writer = threading.Thread(target=write_while, args=(sink, stop))
    writer.start()
    try:
        gone = MjpegReader(sink)
        gone.next_jpeg()
        gone.close()
        # then the preview lets it go, and a new viewer gets frames
        wait_until(lambda: sink.stats()["viewers"] == 0, timeout=5, what="the closed viewer to be let go")
        again = MjpegReader(sink)
        assert len(again.next_jpeg()) > 1000
        again.close()
    finally:
        stop.set()
        writer.join()
    assert sink.stats()["viewers_served"] == 2


def test_preview_when_frames_come_faster_than_max_fps_encodes_at_most_max_fps() -> None:
    # given a preview capped at 10 frames a second, and a viewer
    capped = preview_spec(max_fps=10.0).build("people")
    capped.open()
    try:
        viewer = MjpegReader(capped)
        wait_until(lambda: capped.stats()["viewers"] == 1, timeout=5, what="the viewer to join")
        # when 1 s of frames arrives at 100 a second
        started = time.monotonic()
        index = 0
        while time.monotonic() - started < 1.0:
            capped.write(*frame(index))
            index += 1
            time.sleep(0.01)
        stats = capped.stats()
        viewer.close()
    finally:
        capped.close()
    # then
    assert int(stats["frames"]) > 50  # type: ignore[call-overload]
    assert 8 <= int(stats["encoded"]) <= 12, stats  # type: ignore[call-overload]


def test_preview_close_ends_the_streams_and_leaves_no_thread_or_listening_socket() -> None:
    # given an open preview with a viewer in the middle of its stream
    before = set(threading.enumerate())
    preview = preview_spec().build("people")
    preview.open()
    viewer = MjpegReader(preview)
    wait_until(lambda: preview.stats()["viewers"] == 1, timeout=5, what="the viewer to join")
    preview.write(*frame(0))
    viewer.next_jpeg()

    # when
    started = time.monotonic()
    preview.close()
    took = time.monotonic() - started

    # then
    assert took < 2.0, f"close took {took:.1f} s"
    assert set(threading.enumerate()) - before == set(), "no thread of the preview outlives close()"
    assert viewer.response.read().strip() in (b"", b"--frame"), "the viewer's stream ends (read returns at its end)"
    viewer.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", preview.port), timeout=2).close()
    preview_spec(port=preview.port).check()  # the next pipeline can listen there (past the TIME_WAIT)
    preview.close()  # a second close is harmless


def test_preview_when_the_port_is_in_use_says_so_in_one_line_before_the_start_and_at_open() -> None:
    # given a program already listening on the port
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        spec = preview_spec(port=port)
        # when / then
        with pytest.raises(SinkError) as before_start:
            spec.check()
        with pytest.raises(SinkError) as at_open:
            spec.build("people").open()
    finally:
        taken.close()
    for problem in (str(before_start.value), str(at_open.value)):
        assert "\n" not in problem
        assert f"127.0.0.1:{port} is already in use" in problem and "port: 0 picks a free one" in problem


@pytest.mark.slow  # an edge-sdk subprocess
def test_preview_when_the_port_is_in_use_edge_sdk_run_stops_with_one_error_line(tmp_path: Path) -> None:
    # given a pipeline whose preview port another program listens on
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    float_classifier(tmp_path / "classifier.onnx")
    pipeline = tmp_path / "watch.yaml"
    pipeline.write_text(
        f"""name: watch
model: {{path: classifier.onnx}}
preprocess: {{resize: [8, 8], layout: nchw, dtype: float32, scale: 0.00392156862745098}}
sources: [{{uri: "synthetic://?frames=5&size=16x16", name: cam}}]
postprocess: {{type: classification, output: logits}}
sinks: [{{type: preview, port: {port}}}]
"""
    )
    env = dict(os.environ, EDGE_SDK_CACHE_DIR=str(tmp_path / "engines"))
    try:
        done = subprocess.run([EDGE_SDK, "run", str(pipeline)], capture_output=True, text=True, env=env, timeout=240)
    finally:
        taken.close()
    # then
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"127.0.0.1:{port} is already in use" in errors[0], errors[0]


def test_preview_port_zero_is_picked_when_read_and_the_url_names_it() -> None:
    spec = preview_spec()
    assert spec.port > 0
    assert preview_url(spec) == f"http://127.0.0.1:{spec.port}/"
    everywhere = preview_spec(host="0.0.0.0", port=free_port("0.0.0.0"))
    assert preview_url(everywhere) == f"http://127.0.0.1:{everywhere.port}/", "a browser here reaches it on loopback"


def test_preview_settings_outside_their_range_or_a_foreign_host_are_refused_with_the_field() -> None:
    with pytest.raises(ValidationError, match="port"):
        preview_spec(port=70000)
    with pytest.raises(ValidationError, match="quality"):
        preview_spec(quality=0)
    with pytest.raises(ValidationError, match="max_fps"):
        preview_spec(max_fps=0.0)
    with pytest.raises(ValidationError, match="not an address of this host"):
        preview_spec(host="192.0.2.1")  # TEST-NET-1: never this machine's
    with pytest.raises(SinkError, match=r"192\.0\.2\.1 is not an address of this host"):
        preview_spec(host="192.0.2.1", port=8090).check()


def test_open_in_browser_without_a_display_returns_false_so_the_caller_prints_the_url(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("the display check is Linux's")
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER"):
        monkeypatch.delenv(name, raising=False)
    assert open_in_browser("http://127.0.0.1:1/") is False


@pytest.mark.slow  # a pipeline with an engine build
def test_preview_in_an_inline_pipeline_a_stuck_viewer_costs_no_frame_and_its_drops_show_in_the_stats(
    tmp_path: Path, cpu_profile: DeviceProfile, engine_cache: EngineCache
) -> None:
    # given an inline pipeline: a 50 FPS camera stand-in (4 s), a classifier, a preview and a JSONL file
    float_classifier(tmp_path / "classifier.onnx")
    uri = f"synthetic://?image={ASTRONAUT}&frames=200&size=640x480&fps=50&realtime=true"
    path = tmp_path / "watch.yaml"
    path.write_text(
        f"""name: watch
model: {{path: classifier.onnx}}
preprocess: {{resize: [8, 8], layout: nchw, dtype: float32, scale: 0.00392156862745098}}
sources: [{{uri: '{uri}', name: cam}}]
postprocess: {{type: classification, output: logits}}
sinks: [{{type: preview, port: 0, max_fps: 120}}, {{type: jsonl, path: results.jsonl}}]
runtime: {{mode: inline}}
"""
    )
    config = load_pipeline(path)
    spec = config.sinks[0]
    assert isinstance(spec, PreviewSinkSpec)
    summaries: list[RunSummary] = []
    runner = threading.Thread(target=lambda: summaries.append(run_pipeline(config, cpu_profile, engine_cache)))
    runner.start()
    stuck = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    seen: list[dict[str, object]] = []
    try:
        assert wait_for_preview(preview_url(spec), timeout_s=60)
        # when a viewer asks for the stream and never reads it
        stuck.connect(("127.0.0.1", spec.port))
        stuck.sendall(b"GET /stream.mjpg HTTP/1.1\r\nHost: preview\r\n\r\n")
        while runner.is_alive():
            with contextlib.suppress(OSError):
                seen.append(get_json(preview_url(spec) + "stats.json"))
            time.sleep(0.2)
    finally:
        runner.join(timeout=60)
        stuck.close()

    # then the pipeline went at the camera's pace to the end, and the stuck viewer's misses were counted
    assert summaries and summaries[0].frames == 200 and not summaries[0].sink_failures, summaries
    assert summaries[0].fps > 40, f"the pipeline kept the camera's 50 FPS, not {summaries[0].fps:.1f}"
    assert len((tmp_path / "results.jsonl").read_text().splitlines()) == 200
    assert max(int(s["dropped"]) for s in seen) > 0, seen[-1:]  # type: ignore[call-overload]
