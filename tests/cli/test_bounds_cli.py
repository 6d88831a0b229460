"""Bad numbers, model paths and ports through the real `edge-sdk` commands: one error line, a non-zero
exit code, no traceback, and an engine cache left byte for byte as it was."""

from __future__ import annotations

import hashlib
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.conftest import Run
from tests.conftest import REPO_ROOT

PIPELINE = """\
name: bounds
model:
  path: {model}
preprocess:
  resize: [300, 300]
sources:
  - uri: synthetic://?image={image}&frames=3&size=320x240
postprocess:
  type: ssd
  labels: [person]
runtime:
  ring_slots: 4
"""
ASTRONAUT = REPO_ROOT / "tools" / "assets" / "astronaut.jpg"


def snapshot(folder: Path) -> dict[str, str]:
    """Every file and folder under `folder`, with the sha256 of each file's bytes."""
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
        for path in sorted(folder.rglob("*"))
    }


def one_error_line(code: int, err: str, *fragments: str) -> str:
    assert code != 0, "a bad input exits non-zero"
    assert "Traceback" not in err and "internal error" not in err, f"no traceback, no internal error: {err!r}"
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), f"exactly one 'error:' line: {err!r}"
    for fragment in fragments:
        assert fragment in lines[0], f"the error should mention {fragment!r}: {lines[0]!r}"
    return lines[0]


@pytest.fixture(scope="module")
def filled_cache(tmp_path_factory: pytest.TempPathFactory, demo_model: Path) -> Path:
    """A cache with one real engine in it: the shipped detector for x86-cpu."""
    from edge_sdk.engines.cache import EngineCache
    from edge_sdk.engines.engine import prepare_engine
    from edge_sdk.profiles import ProfileCatalog

    folder = tmp_path_factory.mktemp("cache") / "engines"
    profile = ProfileCatalog(REPO_ROOT / "device_profiles").load("x86-cpu")
    prepare_engine(demo_model, profile, cache=EngineCache(folder))
    return folder


@pytest.fixture
def cache(filled_cache: Path, tmp_path: Path) -> Iterator[Path]:
    """A private copy of the filled cache; the test fails if a refused command changed a byte of it."""
    folder = tmp_path / "engines"
    shutil.copytree(filled_cache, folder)
    before = snapshot(folder)
    yield folder
    assert snapshot(folder) == before, "a refused command must leave the engine cache byte-identical"


def write_pipeline(tmp_path: Path, demo_model: Path, old: str = "", new: str = "") -> Path:
    text = PIPELINE.format(model=demo_model, image=ASTRONAUT)
    assert old in text
    path = tmp_path / "pipeline.yaml"
    path.write_text(text.replace(old, new), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("old", "new", "line", "key"),
    [
        ("resize: [300, 300]", "resize: [0, 0]", 5, "preprocess.resize.0"),
        ("resize: [300, 300]", "resize: [60000, 60000]", 5, "preprocess.resize.0"),
        ("ring_slots: 4", "ring_slots: 1e9", 12, "runtime.ring_slots"),
        ("ring_slots: 4", "batch_size: 1e6", 12, "runtime.batch_size"),
        ("ring_slots: 4", "inference_workers: 64", 12, "runtime.inference_workers"),
        ("size=320x240", "size=60000x60000", 7, "sources.0.uri"),
    ],
    ids=["resize-0x0", "resize-60000", "ring-slots-1e9", "batch-1e6", "workers-64", "synthetic-60000"],
)
def test_run_when_a_number_is_out_of_bounds_prints_file_line_and_builds_nothing(
    edge_sdk: Run, cache: Path, tmp_path: Path, demo_model: Path, old: str, new: str, line: int, key: str
) -> None:
    # given a pipeline with one number out of bounds
    pipeline = write_pipeline(tmp_path, demo_model, old, new)
    # when
    code, out, err = edge_sdk("--cache-dir", cache, "run", pipeline, "--profile", "x86-cpu")
    # then: refused at load, before any engine build (the cache fixture checks it is unchanged)
    one_error_line(code, err, f"{pipeline}:{line}:", f"key '{key}'")
    assert code == 2 and out == "", "nothing ran"


def test_run_when_two_sources_share_a_name_refuses_the_pipeline(
    edge_sdk: Run, cache: Path, tmp_path: Path, demo_model: Path
) -> None:
    line = f"  - uri: synthetic://?image={ASTRONAUT}&frames=3&size=320x240"
    pipeline = write_pipeline(tmp_path, demo_model, line, f"{line}\n{line}")
    code, _, err = edge_sdk("--cache-dir", cache, "run", pipeline, "--profile", "x86-cpu")
    one_error_line(code, err, f"{pipeline}:8:", "key 'sources.1.uri'", "'synthetic'", "set name:")


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_run_when_the_prometheus_port_is_in_use_prints_one_line(
    edge_sdk: Run, cache: Path, tmp_path: Path, demo_model: Path, busy_port: int
) -> None:
    pytest.importorskip("prometheus_client")
    # given a pipeline whose metrics port another process holds
    pipeline = write_pipeline(
        tmp_path, demo_model, "ring_slots: 4", f"ring_slots: 4\n  prometheus: {{port: {busy_port}}}"
    )
    # when
    code, _, err = edge_sdk("--cache-dir", cache, "run", pipeline, "--profile", "x86-cpu")
    # then
    line = one_error_line(code, err)
    assert line == f"error: prometheus: port {busy_port} on 127.0.0.1 is in use", line


def test_bench_when_batch_is_100000_refuses_before_reading_or_building(
    edge_sdk: Run, cache: Path, demo_model: Path
) -> None:
    code, _, err = edge_sdk("--cache-dir", cache, "bench", demo_model, "--profile", "x86-cpu", "--batch", "1,100000")
    one_error_line(code, err, "expected batch sizes 1..1024, got 100000")
    assert code == 2


def test_bench_when_dynamic_inputs_would_need_too_much_memory_refuses_before_building(
    edge_sdk: Run, cache: Path, demo_model: Path
) -> None:
    # the detector takes uint8 [N, H, W, 3] of any size: 1024 x 8192 x 8192 x 3 bytes is 192 GiB
    code, _, err = edge_sdk(
        "--cache-dir", cache, "bench", demo_model, "--profile", "x86-cpu", "--batch", "1024", "--dynamic-size", "8192"
    )
    one_error_line(code, err, "needs 192.0 GiB", "expected at most 4 GiB")


@pytest.mark.parametrize("command", ["build", "bench", "inspect"])
def test_model_commands_when_model_is_dev_zero_refuse_without_reading(edge_sdk: Run, cache: Path, command: str) -> None:
    args = ["--profile", "x86-cpu"] if command != "inspect" else []
    code, _, err = edge_sdk("--cache-dir", cache, command, "/dev/zero", *args)
    one_error_line(code, err, "expected a regular model file, got a character device: /dev/zero")


def test_run_when_the_model_path_is_a_folder_refuses_before_building(
    edge_sdk: Run, cache: Path, tmp_path: Path, demo_model: Path
) -> None:
    pipeline = write_pipeline(tmp_path, demo_model, f"path: {demo_model}", f"path: {tmp_path}")
    code, _, err = edge_sdk("--cache-dir", cache, "run", pipeline, "--profile", "x86-cpu")
    one_error_line(code, err, f"expected a regular model file, got a folder: {tmp_path}")
