"""Ctrl-C and SIGTERM at each moment of `edge-sdk run`, in both runtimes: one line, exit 128 + the
signal, no traceback from the CLI or a stage, nothing left running or in /dev/shm, and the summary
claims only files that exist."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

from .run_process import (
    Finished,
    RunningCli,
    built_engine_cache,
    claimed_outputs,
    detector_pipeline,
    result_lines,
    start_run,
)

pytestmark = pytest.mark.slow  # edge-sdk subprocesses and multi-process runs: not in make test-fast

SINKS: list[dict[str, object]] = [
    {"type": "jsonl", "path": "out/results.jsonl"},
    {"type": "video", "path": "out/annotated.mp4"},
]
CTRL_C = (signal.SIGINT, True)
SYSTEMCTL_STOP = (signal.SIGTERM, True)
KILL_PARENT = (signal.SIGTERM, False)
HOW = [CTRL_C, SYSTEMCTL_STOP]
HOW_IDS = ["ctrl-c", "sigterm-group"]
EARLIER_RESULTS = '{"source": "door", "frame": 0, "from": "an earlier run"}\n'


@pytest.fixture(scope="module")
def built_cache(tmp_path_factory: pytest.TempPathFactory, demo_model: Path) -> Path:
    return built_engine_cache(tmp_path_factory, demo_model)


def assert_stopped_cleanly(run: RunningCli, done: Finished, sig: signal.Signals, while_: str) -> str:
    """The promises of a stop by signal; returns the one `interrupted` line."""
    output = done.stdout + done.stderr
    assert done.returncode == 128 + sig, f"{while_}: exit 128 + {sig.name}, got {done.returncode}\n{output}"
    assert "Traceback" not in output and "KeyboardInterrupt" not in output, f"{while_}: no traceback\n{output}"
    said = [line for line in output.splitlines() if "interrupted" in line]
    assert len(said) == 1, f"{while_}: one line says it was interrupted, got {said}\n{output}"
    assert sig.name in said[0], said[0]
    for path in claimed_outputs(done.stdout):
        assert path.exists(), f"{while_}: {path.name} is claimed as an output, yet it does not exist\n{done.stdout}"
    processes, segments = run.left_behind()
    assert not processes, f"{while_}: processes left running: {processes}"
    assert not segments, f"{while_}: shared memory left in /dev/shm: {segments}"
    return said[0]


@pytest.mark.parametrize("mode", ["processes", "inline"])
@pytest.mark.parametrize(("sig", "to_group"), HOW, ids=HOW_IDS)
def test_run_when_stopped_while_the_engine_is_built_says_so_in_one_line_and_leaves_nothing(
    tmp_path: Path, demo_model: Path, mode: str, sig: signal.Signals, to_group: bool
) -> None:
    # given a first run, which builds the detector's engine (it holds the cache key's lock meanwhile)
    cache = tmp_path / "cache"
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "annotated.mp4").write_bytes(b"an earlier run's video")
    run = start_run(detector_pipeline(tmp_path, demo_model, SINKS, mode), cache)
    run.wait_for(lambda: any(cache.glob("*.lock")), 90, "the engine build")
    # when
    run.send(sig, to_group)
    done = run.finish()
    # then
    said = assert_stopped_cleanly(run, done, sig, "while building")
    assert "during start-up" in said and "no frame" in said, said
    assert claimed_outputs(done.stdout) == [], done.stdout
    assert not (tmp_path / "out" / "results.jsonl").exists(), "no sink was opened"
    assert not list(cache.glob("*.lock")), "the interrupted build leaves no lock"


@pytest.mark.parametrize(("sig", "to_group"), HOW, ids=HOW_IDS)
def test_run_when_stopped_while_its_stage_processes_start_says_so_in_one_line_and_leaves_nothing(
    tmp_path: Path, demo_model: Path, built_cache: Path, sig: signal.Signals, to_group: bool
) -> None:
    # given the files an earlier run wrote, and a run whose engine is cached, signalled as soon as
    # its first stage process has started (while the stages import or load the engine, as a rule)
    results = tmp_path / "out" / "results.jsonl"
    earlier_video = tmp_path / "out" / "annotated.mp4"
    earlier_video.parent.mkdir()
    earlier_video.write_bytes(b"an earlier run's video")
    results.write_text(EARLIER_RESULTS)
    run = start_run(detector_pipeline(tmp_path, demo_model, SINKS), built_cache)
    run.wait_for(run.stage_started, 90, "a stage process")
    # when
    run.send(sig, to_group)
    done = run.finish()
    # then
    said = assert_stopped_cleanly(run, done, sig, "while the stages start")
    assert "nan" not in done.stdout, f"no NaN latency in the summary: {done.stdout}"
    frames = 0 if results.read_text() == EARLIER_RESULTS else result_lines(results)
    if frames:  # a stage that starts in milliseconds (forked) may deliver a frame or two first
        assert re.search(rf"stopped after {frames} frames?$", said), said
        return
    assert re.search(r"before the first frame|during start-up", said), said
    assert earlier_video.read_bytes() == b"an earlier run's video", "no frame reached the video sink"
    assert "annotated.mp4" not in done.stdout, f"an earlier run's file is not this run's output: {done.stdout}"


@pytest.mark.parametrize(
    ("mode", "sig", "to_group"),
    [("processes", *CTRL_C), ("processes", *SYSTEMCTL_STOP), ("processes", *KILL_PARENT), ("inline", *CTRL_C),
     ("inline", *SYSTEMCTL_STOP)],
    ids=["processes-ctrl-c", "processes-sigterm-group", "processes-sigterm-parent", "inline-ctrl-c", "inline-sigterm"],
)  # fmt: skip
def test_run_when_stopped_mid_run_drains_says_how_many_frames_and_lists_what_it_wrote(
    tmp_path: Path, demo_model: Path, built_cache: Path, mode: str, sig: signal.Signals, to_group: bool
) -> None:
    # given a run delivering results
    results = tmp_path / "out" / "results.jsonl"
    run = start_run(detector_pipeline(tmp_path, demo_model, SINKS, mode), built_cache)
    run.wait_for(lambda: result_lines(results) >= 3, 90, "three results")
    # when
    run.send(sig, to_group)
    done = run.finish()
    # then
    said = assert_stopped_cleanly(run, done, sig, "mid-run")
    assert re.search(rf"stopped after {result_lines(results)} frames?$", said), (
        f"the count is what the sink holds: {said}"
    )
    claimed = {path.name for path in claimed_outputs(done.stdout)}
    assert claimed == {"results.jsonl", "annotated.mp4"}, done.stdout


@pytest.mark.parametrize("mode", ["processes", "inline"])
def test_run_when_a_second_signal_arrives_while_it_stops_still_stops_once_and_cleanly(
    tmp_path: Path, demo_model: Path, built_cache: Path, mode: str
) -> None:
    # given a run delivering results, stopped by Ctrl-C
    results = tmp_path / "out" / "results.jsonl"
    run = start_run(detector_pipeline(tmp_path, demo_model, SINKS, mode), built_cache)
    run.wait_for(lambda: result_lines(results) >= 3, 90, "three results")
    run.send(signal.SIGINT)
    # when a second Ctrl-C and a SIGTERM come while it drains
    run.send(signal.SIGINT)
    run.send(signal.SIGTERM)
    done = run.finish()
    # then it stops as the first signal asked
    assert_stopped_cleanly(run, done, signal.SIGINT, "while stopping")
