"""What `edge-sdk run` says while it runs: status lines read as sentences (no doubled word, no Python
repr), and a failed sink is said once and not listed as an output."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from edge_sdk.core.status import StatusEvent, StatusKind

from .run_process import claimed_outputs, detector_pipeline, start_run

DOUBLED_WORD = re.compile(r"\b(\w+) \1\b")
PYTHON_REPR = re.compile(r"\{'|\['|\bNone\b")


@pytest.mark.parametrize(
    ("kind", "subject", "message", "sentence"),
    [
        (StatusKind.SOURCE_CONNECTED, "door", "connected", "source door connected"),
        (StatusKind.SOURCE_CONNECTED, "door", "connected after 3 attempts", "source door connected after 3 attempts"),
        (StatusKind.SOURCE_ENDED, "door", "ended", "source door ended"),
        (StatusKind.SOURCE_LOST, "door", "lost: read timed out", "source door lost: read timed out"),
        (StatusKind.SOURCE_RECONNECTING, "door", "attempt 2/5 in 1.0 s", "source door reconnecting: attempt 2/5 in 1.0 s"),
        (StatusKind.SOURCE_RECONNECTED, "door", "reconnected after 2 attempts", "source door reconnected after 2 attempts"),
        (StatusKind.SOURCE_FAILED, "door", "source door: cannot open x.mp4", "source door failed: cannot open x.mp4"),
        (StatusKind.SOURCE_FAILED, "door", "gave up after 3 reconnect attempts: None", "source door failed: gave up after 3 reconnect attempts"),
        (StatusKind.SINK_FAILED, "jsonl:out/r.jsonl", "open: cannot open out/r.jsonl", "sink jsonl:out/r.jsonl failed: open: cannot open out/r.jsonl"),
        (StatusKind.STAGE_FAILED, "output", "stage output crashed (exit code 1); pipeline stopped", "stage output failed: crashed (exit code 1); pipeline stopped"),
        (StatusKind.FRAMES_SKIPPED, "door", "frame 3 of 9 of video x.mp4 cannot be decoded: skipped", "source door: frame 3 of 9 of video x.mp4 cannot be decoded: skipped"),
        (StatusKind.PIPELINE_STARTED, "demo", "", "pipeline demo started"),
    ],
)  # fmt: skip
def test_status_event_describe_is_a_sentence_without_doubled_words(
    kind: StatusKind, subject: str, message: str, sentence: str
) -> None:
    assert StatusEvent(kind, subject, message).describe() == sentence


@pytest.mark.slow  # edge-sdk subprocesses and multi-process runs: not in make test-fast
@pytest.mark.parametrize("mode", ["processes", "inline"])
def test_run_says_each_status_once_as_a_sentence_and_a_failed_sink_once_and_not_as_an_output(
    tmp_path: Path, demo_model: Path, mode: str
) -> None:
    # given a live source read to its end, a JSONL sink that works and one that cannot open (a file
    # stands where its folder should be)
    (tmp_path / "blocked").write_text("not a folder")
    sinks: list[dict[str, object]] = [
        {"type": "jsonl", "path": "out/results.jsonl"},
        {"type": "jsonl", "path": "blocked/results.jsonl"},
    ]
    pipeline = detector_pipeline(tmp_path, demo_model, sinks, mode, max_frames=10)
    # when
    done = start_run(pipeline, tmp_path / "cache").finish(timeout=180)
    # then
    assert done.returncode == 0, done.stderr
    lines = (done.stdout + done.stderr).splitlines()
    for line in lines:
        assert not DOUBLED_WORD.search(line), f"a doubled word: {line!r}"
        assert not PYTHON_REPR.search(line), f"a Python repr: {line!r}"
    failure = [line for line in lines if "blocked/results.jsonl" in line]
    assert len(failure) == 1 and "failed" in failure[0], f"the failed sink is said once: {failure}"
    assert claimed_outputs(done.stdout) == [tmp_path / "out" / "results.jsonl"], done.stdout
    assert "info: source door connected" in lines, f"either runtime logs the source's state changes: {done.stderr}"
