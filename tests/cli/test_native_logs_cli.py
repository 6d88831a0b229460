"""What FFmpeg, OpenCV and ONNX Runtime print themselves (straight to stderr, past Python): nothing by
default, their warnings with --debug. A real `edge-sdk` process, since their lines bypass sys.stderr."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.sources.rtsp_server import find_ffmpeg
from tests.sources.test_source_failures import truncate, write_mp4
from tools.harness import onnx_models

pytestmark = pytest.mark.slow  # edge-sdk subprocesses: not in make test-fast

EDGE_SDK = str(Path(sys.executable).with_name("edge-sdk"))
RAW_LIBRARY_LINE = re.compile(r"^\s*(\x1b\[[0-9;]*m)?\[(mov,mp4|mpeg4|h264|[A-Za-z0-9_,]+ @ 0x|OPENCV|\s*WARN|W:onnx)")
"""FFmpeg's "[mpeg4 @ 0x...] ...", OpenCV's "[ WARN:0@...]" or "[OPENCV:FFMPEG:16]", ONNX Runtime's "[W:onnxruntime...]"."""


def edge_sdk(*args: object, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENCV_LOG_LEVEL", "OPENCV_FFMPEG_LOGLEVEL")}
    env["EDGE_SDK_CACHE_DIR"] = str(cwd / "engines")
    return subprocess.run(
        [EDGE_SDK, *map(str, args)], capture_output=True, text=True, cwd=cwd, env=env, timeout=240, check=False
    )


def raw_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if RAW_LIBRARY_LINE.match(line)]


def pipeline(folder: Path, video: Path) -> Path:
    model = onnx_models.uint8_mean_classifier(folder / "mean.onnx")
    path = folder / "pipeline.yaml"
    document = {
        "name": "door",
        "model": {"path": str(model)},
        "sources": [{"uri": str(video), "name": "door"}],
        "postprocess": {"type": "classification", "output": "scores"},
        "sinks": [{"type": "jsonl", "path": "out/results.jsonl"}],
        "runtime": {"mode": "inline"},
    }
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


def test_run_when_the_video_has_lost_its_index_prints_the_sdk_line_and_no_ffmpeg_line_unless_debug(
    tmp_path: Path,
) -> None:
    # Given an mp4 cut in half before its index (FFmpeg says "moov atom not found" when it opens it)
    video = truncate(write_mp4(tmp_path / "cut.mp4", frames=30), 0.5)
    path = pipeline(tmp_path, video)

    # When it is run, then run with --debug
    quiet = edge_sdk("run", path, "--profile", "x86-cpu", cwd=tmp_path)
    loud = edge_sdk("--debug", "run", path, "--profile", "x86-cpu", cwd=tmp_path)

    # Then the run fails with the SDK's one line, and FFmpeg's own line shows only under --debug
    assert quiet.returncode != 0
    assert "error: source door" in quiet.stderr and "cut.mp4" in quiet.stderr, quiet.stderr
    assert raw_lines(quiet.stderr) == [], f"no raw library line by default:\n{quiet.stderr}"
    assert "moov atom not found" in loud.stderr, f"--debug shows what FFmpeg said:\n{loud.stderr}"


def test_run_when_the_video_breaks_midway_reports_the_skipped_tail_without_ffmpeg_lines_and_batch_as_a_count(
    tmp_path: Path,
) -> None:
    # Given a streamable mp4 (index first) cut in half: it opens and breaks at its middle
    ffmpeg = find_ffmpeg()
    if ffmpeg is None:
        pytest.skip("needs the ffmpeg binary from imageio-ffmpeg (pip install -e '.[test]')")
    written = write_mp4(tmp_path / "written.mp4", frames=60)
    streamable = tmp_path / "door.mp4"
    subprocess.run(
        [ffmpeg, "-y", "-loglevel", "error", "-i", written, "-c", "copy", "-movflags", "+faststart", streamable],
        check=True,
        timeout=60,
    )
    path = pipeline(tmp_path, truncate(streamable, 0.5))

    # When it is run
    done = edge_sdk("run", path, "--profile", "x86-cpu", cwd=tmp_path)

    # Then the frames before the break are processed, the skipped tail is the SDK's one warning,
    # and FFmpeg's per-packet lines ("[mpeg4 @ 0x...] ac-tex damaged", "partial file") are not printed
    assert done.returncode == 0, done.stderr
    assert "frames skipped" in done.stderr, done.stderr
    assert raw_lines(done.stderr) == [], f"no raw library line:\n{done.stderr}"
    assert "partial file" not in done.stderr and "damaged" not in done.stderr
    # And each result's timings write batch as the count of frames it is
    text = (tmp_path / "out" / "results.jsonl").read_text()
    results = [json.loads(line) for line in text.splitlines()]
    assert results, "the frames before the break have results"
    assert all(type(r["timings_ms"]["batch"]) is int and r["timings_ms"]["batch"] == 1 for r in results)
    assert '"batch": 1.0' not in text


def test_build_when_onnx_runtime_warns_shows_it_only_with_debug(tmp_path: Path) -> None:
    # Given a model ONNX Runtime warns about when it saves the optimised graph (NCHWc layout)
    model = onnx_models.float_classifier(tmp_path / "classifier.onnx")

    # When it is built, then built again into a fresh cache with --debug
    quiet = edge_sdk("build", model, "--profile", "x86-cpu", cwd=tmp_path)
    shutil.rmtree(tmp_path / "engines")
    loud = edge_sdk("--debug", "build", model, "--profile", "x86-cpu", cwd=tmp_path)

    # Then ONNX Runtime's own warning line shows only with --debug
    assert quiet.returncode == 0 and loud.returncode == 0, quiet.stderr + loud.stderr
    assert "onnxruntime:" not in quiet.stderr and raw_lines(quiet.stderr) == [], quiet.stderr
    assert "W:onnxruntime" in loud.stderr, f"--debug shows ONNX Runtime's warnings:\n{loud.stderr}"


def test_run_with_debug_logs_at_debug_in_the_stage_processes_too(tmp_path: Path, small_video: Path) -> None:
    # given a multi-process pipeline whose output stage has a video sink (which says at DEBUG how it encodes)
    path = pipeline(tmp_path, small_video)
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    document["sinks"].append({"type": "video", "path": "out/annotated.mp4"})
    document["runtime"] = {"mode": "processes", "inference_workers": 1}
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    encoding_line = re.compile(r"video sink \S*annotated\.mp4: .+ at [0-9.]+ fps")
    # when it runs with --debug, then without
    debug = edge_sdk("--debug", "run", path, "--profile", "x86-cpu", cwd=tmp_path)
    quiet = edge_sdk("run", path, "--profile", "x86-cpu", cwd=tmp_path)
    # then the output process logged at the runtime's level each time
    assert debug.returncode == quiet.returncode == 0, debug.stderr + quiet.stderr
    assert encoding_line.search(debug.stderr), debug.stderr[-2000:]
    assert not encoding_line.search(quiet.stderr), quiet.stderr[-2000:]
