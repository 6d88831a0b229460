"""Bounds on every number a pipeline file holds, and unique source names: refused when the file loads,
with the file, the line and the key, before any engine build or process start."""

from __future__ import annotations

from pathlib import Path

import pytest

from edge_sdk.core.errors import ConfigError
from edge_sdk.pipeline.config import load_pipeline, source_display_name
from edge_sdk.sources.registry import create_source
from edge_sdk.sources.spec import SourceSpec

# Line numbers matter: the cases below replace one line each.
BASE_LINES = [
    "name: bounds",  # 1
    "model:",  # 2
    "  path: models/detector.onnx",  # 3
    "preprocess:",  # 4
    "  resize: [300, 300]",  # 5
    "sources:",  # 6
    "  - uri: clips/door.mp4",  # 7
    "  - uri: synthetic://?frames=10&size=64x48",  # 8
    "    reconnect: {initial_delay: 0.5}",  # 9
    "postprocess:",  # 10
    "  type: ssd",  # 11
    "  labels: [person]",  # 12
    "sinks:",  # 13
    "  - type: stdout",  # 14
    "    every: 1",  # 15
    "runtime:",  # 16
    "  ring_slots: 8",  # 17
    "  batch_size: 1",  # 18
    "  prometheus: {port: 9108}",  # 19
]


def pipeline_with(tmp_path: Path, line: int | None = None, text: str = "") -> Path:
    lines = list(BASE_LINES)
    if line is not None:
        lines[line - 1] = text
    path = tmp_path / "jobs" / "pipeline.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def load_error(path: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        load_pipeline(path)
    return str(caught.value)


def test_base_pipeline_when_loaded_is_valid(tmp_path: Path) -> None:
    # the cases below fail only because of the one line they change
    config = load_pipeline(pipeline_with(tmp_path))
    assert config.runtime.ring_slots == 8 and config.preprocess.resize == (300, 300)


@pytest.mark.parametrize(
    ("line", "text", "key", "fragment"),
    [
        pytest.param(17, "  ring_slots: 1e9", "runtime.ring_slots", "'1e9'", id="ring-slots-1e9-is-a-string"),
        pytest.param(17, "  ring_slots: 1.0e+9", "runtime.ring_slots", "1000000000.0", id="ring-slots-float"),
        pytest.param(17, "  ring_slots: 1000000", "runtime.ring_slots", "less than or equal to 1024", id="slots-1e6"),
        pytest.param(17, "  ring_slots: 2", "runtime.ring_slots", "greater than or equal to 3", id="slots-2"),
        pytest.param(17, '  ring_slots: "8"', "runtime.ring_slots", "'8'", id="slots-quoted"),
        pytest.param(17, "  ring_slots: true", "runtime.ring_slots", "got true", id="slots-bool"),
        pytest.param(18, "  batch_size: 1e6", "runtime.batch_size", "'1e6'", id="batch-1e6"),
        pytest.param(18, "  batch_size: 1000000", "runtime.batch_size", "less than or equal to 1024", id="batch-big"),
        pytest.param(18, "  batch_size: 0", "runtime.batch_size", "greater than or equal to 1", id="batch-0"),
        pytest.param(18, "  batch_timeout_ms: 1e12", "runtime.batch_timeout_ms", "'1e12'", id="timeout-string"),
        pytest.param(18, "  batch_timeout_ms: 60000", "runtime.batch_timeout_ms", "10000", id="batch-timeout"),
        pytest.param(18, "  batch_timeout_ms: .nan", "runtime.batch_timeout_ms", "nan", id="batch-timeout-nan"),
        pytest.param(18, "  inference_workers: 64", "runtime.inference_workers", "32", id="workers-64"),
        pytest.param(18, "  inference_workers: 0", "runtime.inference_workers", "1", id="workers-0"),
        pytest.param(18, "  inference_threads: 100000", "runtime.inference_threads", "256", id="threads"),
        pytest.param(18, "  max_restarts: 1000000", "runtime.max_restarts", "100", id="max-restarts"),
        pytest.param(18, "  restart_window_s: .inf", "runtime.restart_window_s", "inf", id="restart-window-inf"),
        pytest.param(18, "  restart_window_s: 0", "runtime.restart_window_s", "greater than 0", id="window-0"),
        pytest.param(18, "  stats_interval_s: 0.000001", "runtime.stats_interval_s", "0.1", id="stats-interval"),
        pytest.param(18, "  max_frame_size: [60000, 60000]", "runtime.max_frame_size.0", "16384", id="frame-60000"),
        pytest.param(18, "  max_frame_size: [1920, 0]", "runtime.max_frame_size.1", "16", id="frame-height-0"),
        pytest.param(19, "  prometheus: {port: 70000}", "runtime.prometheus.port", "65535", id="port-70000"),
        pytest.param(19, "  prometheus: {port: 0}", "runtime.prometheus.port", "1", id="port-0"),
        pytest.param(5, "  resize: [0, 0]", "preprocess.resize.0", "greater than or equal to 1", id="resize-0x0"),
        pytest.param(5, "  resize: [60000, 60000]", "preprocess.resize.0", "8192", id="resize-60000"),
        pytest.param(5, "  resize: [300, -1]", "preprocess.resize.1", "greater than or equal to 1", id="resize-neg"),
        pytest.param(5, "  resize: [300.5, 300]", "preprocess.resize.0", "300.5", id="resize-float"),
        pytest.param(5, "  pad_value: 256", "preprocess.pad_value", "255", id="pad-value"),
        pytest.param(7, "  - {uri: a.mp4, max_frames: 0}", "sources.0.max_frames", "1", id="max-frames-0"),
        pytest.param(7, "  - {uri: a.mp4, max_frames: 1e15}", "sources.0.max_frames", "'1e15'", id="max-frames-str"),
        pytest.param(
            8, "  - uri: synthetic://?size=60000x60000", "sources.1.uri", "at most 16384", id="synthetic-size"
        ),
        pytest.param(8, "  - uri: synthetic://?frames=1e15", "sources.1.uri", "frames=1e15", id="synthetic-frames"),
        pytest.param(8, "  - uri: synthetic://?fps=1e9", "sources.1.uri", "fps=1e9", id="synthetic-fps"),
        pytest.param(
            8, "  - uri: rtsp://cam/live?open_timeout_ms=99999999", "sources.1.uri", "600000", id="rtsp-timeout"
        ),
        pytest.param(8, "  - uri: v4l2:///dev/video0?width=100000", "sources.1.uri", "width", id="v4l2-width"),
        pytest.param(
            9, "    reconnect: {initial_delay: 1e9}", "sources.1.reconnect.initial_delay", "'1e9'", id="delay"
        ),
        pytest.param(
            9, "    reconnect: {max_delay: 1000000}", "sources.1.reconnect.max_delay", "86400", id="max-delay"
        ),
        pytest.param(9, "    reconnect: {multiplier: 1000}", "sources.1.reconnect.multiplier", "100", id="multiplier"),
        pytest.param(
            9, "    reconnect: {max_attempts: 0}", "sources.1.reconnect.max_attempts", "1", id="max-attempts-0"
        ),
        pytest.param(15, "    every: 0", "sinks.0.every", "greater than or equal to 1", id="stdout-every-0"),
        pytest.param(15, "    every: 1e12", "sinks.0.every", "'1e12'", id="stdout-every-string"),
        pytest.param(14, "  - {type: mqtt, qos: 3}", "sinks.0.qos", "less than or equal to 2", id="mqtt-qos"),
        pytest.param(14, "  - {type: mqtt, max_queued: 100000000}", "sinks.0.max_queued", "100000", id="mqtt-queue"),
        pytest.param(14, "  - {type: video, path: a.mp4, fps: 1e6}", "sinks.0.fps", "'1e6'", id="video-fps"),
        pytest.param(14, "  - {type: video, path: a.mp4, fps: 0}", "sinks.0.fps", "greater than 0", id="fps-0"),
    ],
)
def test_load_pipeline_when_a_number_is_out_of_bounds_names_file_line_and_key(
    tmp_path: Path, line: int, text: str, key: str, fragment: str
) -> None:
    # given a valid pipeline with one number out of bounds
    path = pipeline_with(tmp_path, line, text)
    if text.startswith("  - {type:"):  # a whole sink on one line replaces the stdout sink and its option
        path.write_text(path.read_text().replace("    every: 1\n", ""))
    # when
    message = load_error(path)
    # then
    assert message.startswith(f"{path}:{line}: "), f"the error names the file and line {line}: {message}"
    assert f"key '{key}'" in message, f"the error names the key {key}: {message}"
    assert fragment in message, f"the error shows the bound or the value ({fragment}): {message}"
    assert "\n" not in message, f"one line: {message!r}"


def test_load_pipeline_when_two_sources_derive_the_same_name_points_at_the_second(tmp_path: Path) -> None:
    # given two files called door in different folders: both would be named 'door' in results
    path = pipeline_with(tmp_path, 8, "  - uri: /var/clips/door.mkv")
    # when
    message = load_error(path)
    # then
    assert message.startswith(f"{path}:8: key 'sources.1.uri': "), f"points at the second source: {message}"
    assert "sources.0 is also 'door'" in message and "set name:" in message, f"says what to do: {message}"


def test_load_pipeline_when_a_name_repeats_a_derived_name_points_at_the_name(tmp_path: Path) -> None:
    path = pipeline_with(tmp_path, 9, "    name: door")
    message = load_error(path)
    assert message.startswith(f"{path}:9: key 'sources.1.name': "), f"points at the name key: {message}"
    assert "'door'" in message


def test_load_pipeline_when_two_unnamed_synthetic_sources_are_refused(tmp_path: Path) -> None:
    path = pipeline_with(tmp_path, 7, "  - uri: synthetic://?frames=5")
    message = load_error(path)
    assert "sources.1.uri" in message and "'synthetic'" in message, message


def test_load_pipeline_when_sources_have_distinct_names_accepts_them(tmp_path: Path) -> None:
    path = pipeline_with(tmp_path, 9, "    name: door-synthetic")
    path.write_text(path.read_text().replace("synthetic://?frames=10&size=64x48", "clips/other/door.mp4"))
    config = load_pipeline(path)
    assert [source_display_name(spec) for spec in config.sources] == ["door", "door-synthetic"]


@pytest.mark.parametrize(
    "uri",
    [
        "clips/door.mp4",
        "file:///videos/yard.mkv",
        "images://frames/lobby",
        "images://frames/lobby/",
        "synthetic://?frames=3",
        "rtsp://user:pw@cam.local:554/streams/front?transport=udp",
        "rtsps://cam.local",
        "v4l2:///dev/video3",
        "3",
    ],
)
def test_source_display_name_when_unnamed_equals_the_name_the_source_gets(tmp_path: Path, uri: str) -> None:
    # the duplicate check sees the names users see in results: the ones the source classes derive
    spec = SourceSpec(uri=uri)
    assert source_display_name(spec) == create_source(spec, tmp_path).name, f"same name for {uri}"
