"""`edge-sdk run --json` and `--jsonl` for scripts: stdout holds only what they parse, even with a
stdout sink in the pipeline, and even when the run is interrupted."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path
from typing import Any

import pytest

from .conftest import Run
from .run_process import built_engine_cache, detector_pipeline, result_lines, start_run

pytestmark = pytest.mark.slow  # edge-sdk subprocesses and multi-process runs: not in make test-fast

FRAMES = 12
SINKS: list[dict[str, object]] = [{"type": "stdout"}, {"type": "jsonl", "path": "out/results.jsonl"}]


@pytest.fixture(scope="module")
def built_cache(tmp_path_factory: pytest.TempPathFactory, demo_model: Path) -> Path:
    return built_engine_cache(tmp_path_factory, demo_model)


def strict_json(text: str) -> Any:
    """json.loads that refuses NaN and Infinity, which are not JSON (jq and most parsers reject them)."""

    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("mode", ["processes", "inline"])
def test_run_json_prints_one_json_document_on_stdout_and_the_stdout_sinks_lines_on_stderr(
    tmp_path: Path, demo_model: Path, mode: str
) -> None:
    # given a pipeline whose sinks include stdout
    pipeline = detector_pipeline(tmp_path, demo_model, SINKS, mode, max_frames=FRAMES)
    # when
    done = start_run(pipeline, tmp_path / "cache", "--json").finish(timeout=180)
    # then stdout is one JSON document, the run summary
    assert done.returncode == 0, done.stderr
    summary = strict_json(done.stdout)
    written = rows(tmp_path / "out" / "results.jsonl")
    assert summary["frames"] == len(written) > 0, summary
    assert summary["outputs"] == [str(tmp_path / "out" / "results.jsonl")]
    assert summary["interrupted_by"] is None and summary["started"] is True
    printed = [line for line in done.stderr.splitlines() if re.match(r"door #\d+ ", line)]
    assert len(printed) == len(written), f"the stdout sink's lines went to stderr: {done.stderr}"


@pytest.mark.parametrize("mode", ["processes", "inline"])
def test_run_jsonl_streams_each_result_as_one_json_line_and_nothing_else_on_stdout(
    tmp_path: Path, demo_model: Path, mode: str
) -> None:
    # given a pipeline with a stdout sink and a JSONL file
    pipeline = detector_pipeline(tmp_path, demo_model, SINKS, mode, max_frames=FRAMES)
    # when
    done = start_run(pipeline, tmp_path / "cache", "--jsonl").finish(timeout=180)
    # then every stdout line is a Result's JSON form, the same rows the JSONL sink wrote
    assert done.returncode == 0, done.stderr
    streamed = [strict_json(line) for line in done.stdout.splitlines()]
    written = rows(tmp_path / "out" / "results.jsonl")
    assert streamed == written and len(streamed) > 0, done.stdout
    frames = [row["frame"] for row in streamed]
    assert frames == sorted(set(frames)), "one line per frame, in order (a live source may drop some)"
    counted = re.search(r"door on x86-cpu: (\d+) frames?\b", done.stderr)
    assert counted and int(counted.group(1)) == len(streamed), f"the summary is on stderr: {done.stderr}"


@pytest.mark.parametrize("moment", ["engine-build", "stages-starting", "running"])
def test_run_json_when_interrupted_still_prints_one_strict_json_document(
    tmp_path: Path, demo_model: Path, built_cache: Path, moment: str
) -> None:
    # given a run with a stdout sink, interrupted by Ctrl-C at `moment` (a first run builds the engine)
    cache = tmp_path / "cache" if moment == "engine-build" else built_cache
    results = tmp_path / "out" / "results.jsonl"
    run = start_run(detector_pipeline(tmp_path, demo_model, SINKS), cache, "--json")
    if moment == "engine-build":
        run.wait_for(lambda: any(cache.glob("*.lock")), 90, "the engine build")
    elif moment == "stages-starting":
        run.wait_for(run.stage_started, 90, "a stage process")
    else:
        run.wait_for(lambda: result_lines(results) >= 3, 90, "three results")
    # when
    run.send(signal.SIGINT)
    done = run.finish()
    # then
    assert done.returncode == 130, done.stderr
    summary = strict_json(done.stdout)
    assert summary["interrupted_by"] == "SIGINT", summary
    assert summary["started"] is (moment != "engine-build"), summary
    assert summary["frames"] == result_lines(results), f"the summary counts what the sink holds: {summary}"
    if summary["frames"] == 0:
        assert summary["latency_p50_ms"] is None, "no frame, no latency (null, not NaN)"
    assert "Traceback" not in done.stderr, done.stderr


def test_run_refuses_json_and_jsonl_together(edge_sdk: Run, tmp_path: Path, demo_model: Path) -> None:
    pipeline = detector_pipeline(tmp_path, demo_model, SINKS, max_frames=FRAMES)
    code, out, err = edge_sdk("run", pipeline, "--json", "--jsonl")
    assert code == 2 and "choose one" in err and out == "", (code, out, err)
