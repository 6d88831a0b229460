"""`edge-sdk build --precision int8 --calib DATA`, run as a user runs it."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import threading
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

from .test_cli import EDGE_SDK, assert_one_line_error, edge_sdk

pytestmark = pytest.mark.slow  # multi-process runs or subprocesses: not in make test-fast

DIGITS = REPO_ROOT / "models" / "digits_cnn.onnx"
CALIBRATION = REPO_ROOT / "models" / "digits_calibration.npz"


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "engines"


def test_build_int8_when_given_calibration_data_builds_once_and_reports_the_accuracy(cache: Path) -> None:
    # When the digits CNN is built in int8 twice
    args = ("build", DIGITS, "--precision", "int8", "--calib", CALIBRATION, "--profile", "x86-cpu")
    first = edge_sdk(*args, cache=cache)
    second = edge_sdk(*args, "--json", cache=cache)

    # Then the first build says what it measured, and the second comes from the cache
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("built: "), first.stdout
    assert "int8: minmax calibration, QDQ uint8 activations / int8 weights per channel" in first.stdout
    assert "accuracy: top-1 " in first.stdout and "(fp32) -> " in first.stdout, "labels in the data: accuracy"
    assert second.returncode == 0, second.stderr
    manifest = json.loads(second.stdout)
    assert manifest["key"]["precision"] == "int8" and manifest["key"]["calibration_sha256"]
    assert manifest["facts"]["int8"]["accuracy"]["task"] == "classification"


def test_build_int8_when_calibration_path_is_wrong_fails_in_one_line_and_builds_nothing(cache: Path) -> None:
    done = edge_sdk(
        "build", DIGITS, "--precision", "int8", "--calib", "no/such/data.npz", "--profile", "x86-cpu", cache=cache
    )
    assert done.returncode == 2
    assert_one_line_error(done, "calibration data not found: no/such/data.npz")
    assert not cache.exists() or not any(cache.iterdir()), "the cache is untouched"


def test_build_int8_when_the_gate_fails_prints_the_report_in_one_line(cache: Path) -> None:
    done = edge_sdk(
        "build",
        DIGITS,
        "--precision",
        "int8",
        "--calib",
        CALIBRATION,
        "--profile",
        "x86-cpu",
        "--min-cosine",
        "1.0",
        cache=cache,
    )
    assert done.returncode == 2
    assert_one_line_error(done, "failed the accuracy gate", "cosine similarity", "allowed minimum 1")


def test_build_when_calib_is_given_without_int8_says_it_needs_precision_int8(cache: Path) -> None:
    done = edge_sdk("build", DIGITS, "--calib", CALIBRATION, "--profile", "x86-cpu", cache=cache)
    assert_one_line_error(done, "--calib applies to int8 builds; expected --precision int8, got fp32")


def test_build_int8_when_no_calib_is_given_asks_for_it(cache: Path) -> None:
    done = edge_sdk("build", DIGITS, "--precision", "int8", "--profile", "x86-cpu", cache=cache)
    assert_one_line_error(done, "precision int8 needs calibration data: add --calib DATA")


def test_build_int8_when_task_is_detection_without_a_pipeline_asks_for_the_decoder(cache: Path) -> None:
    done = edge_sdk(
        "build",
        DIGITS,
        "--precision",
        "int8",
        "--calib",
        CALIBRATION,
        "--task",
        "detection",
        "--profile",
        "x86-cpu",
        cache=cache,
    )
    assert_one_line_error(done, "task detection: expected a pipeline with an ssd or yolo postprocess (--pipeline)")


def _on_a_terminal(*args: object, cache: Path) -> tuple[int, str, str]:
    """Run edge-sdk with stderr on a pseudo-terminal (as in a shell) and stdout piped: (code, stdout, stderr)."""
    master, slave = pty.openpty()
    env = {**os.environ, "EDGE_SDK_CACHE_DIR": str(cache), "COLUMNS": "160", "TERM": "xterm"}
    process = subprocess.Popen(
        [EDGE_SDK, *map(str, args)], stdout=subprocess.PIPE, stderr=slave, cwd=REPO_ROOT, env=env, text=True
    )
    os.close(slave)
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                return
            if not chunk:
                return
            chunks.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    stdout, _ = process.communicate(timeout=240)
    reader.join(timeout=10)
    os.close(master)
    return process.returncode, stdout, b"".join(chunks).decode(errors="replace")


def test_build_int8_on_a_terminal_shows_progress_bars_on_stderr_but_not_under_json(cache: Path) -> None:
    # When a user builds an int8 engine from a shell, then with --json
    args = ("build", DIGITS, "--precision", "int8", "--calib", CALIBRATION, "--profile", "x86-cpu")
    code, stdout, stderr = _on_a_terminal(*args, cache=cache)
    json_code, json_stdout, json_stderr = _on_a_terminal(*args, "--json", cache=cache / "again")

    # Then stderr shows the build's steps as bars (calibration counts its samples), stdout only the result
    assert code == 0, stderr
    assert stdout.startswith("built: "), stdout
    for step in ("reading calibration data", "calibration (minmax)", "onnxruntime build", "equivalence gate"):
        assert step in stderr, f"expected a bar for {step!r} on the terminal: {stderr!r}"
    assert "━" in stderr, "a bar is drawn"
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", stderr).replace("\r", "\n").splitlines()
    logged = [line for line in plain if "info: int8 vs fp32 on held-out data" in line]
    assert logged and all(line.startswith("info: ") for line in logged), (
        f"a log line during the bars prints whole, above them, not inside a bar: {logged}"
    )
    # and under --json nothing but the manifest is printed, and no bar
    assert json_code == 0, json_stderr
    assert json.loads(json_stdout)["key"]["precision"] == "int8"
    assert "calibration (minmax)" not in json_stderr and "━" not in json_stderr, json_stderr


def test_build_int8_when_piped_prints_no_progress(cache: Path) -> None:
    done = edge_sdk("build", DIGITS, "--precision", "int8", "--calib", CALIBRATION, "--profile", "x86-cpu", cache=cache)
    assert done.returncode == 0, done.stderr
    assert "calibration (minmax)" not in done.stderr and "━" not in done.stderr, done.stderr
