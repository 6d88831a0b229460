"""The agent sink's outbox (bounded, ordered, shared by file) and its error outside a device agent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from edge_sdk.core.errors import SinkError
from edge_sdk.sinks.agent import OUTBOX_ENV, AgentSink, ResultsOutbox
from tests.sinks.test_sinks import make_image, make_result
from tools.harness.onnx_models import float_classifier

EDGE_SDK = str(Path(sys.executable).with_name("edge-sdk"))


def test_agent_sink_when_outbox_is_full_then_oldest_results_are_evicted_and_counted(tmp_path: Path) -> None:
    # given the agent's outbox, bounded to 3 results
    agent_side = ResultsOutbox(tmp_path / "outbox.sqlite", create=True, max_entries=3)
    sink = AgentSink("people", outbox=tmp_path / "outbox.sqlite")
    sink.open()

    # when a pipeline hands over 5 results
    for index in range(5):
        sink.write(make_result(index), make_image(index))
    sink.close()

    # then the newest 3 wait, oldest first, with the mqtt sink's payload; 2 were evicted and counted
    entries = agent_side.peek()
    assert [json.loads(entry.payload)["frame"] for entry in entries] == [2, 3, 4]
    assert {(entry.pipeline, entry.source) for entry in entries} == {("people", "cam")}
    assert json.loads(entries[0].payload) == make_result(2).to_dict()
    assert sink.handed == 5 and sink.evicted == 2 and agent_side.evicted() == 2 and agent_side.waiting() == 3

    # and a deleted entry is gone for good (the agent deletes what its client accepted)
    agent_side.delete(entries[0].id)
    assert [entry.id for entry in agent_side.peek()] == [entries[1].id, entries[2].id]
    agent_side.close()


def test_agent_sink_when_no_agent_outbox_then_sink_error_names_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(OUTBOX_ENV, raising=False)
    with pytest.raises(SinkError, match=f"{OUTBOX_ENV} is not set.*device agent"):
        AgentSink("people")
    monkeypatch.setenv(OUTBOX_ENV, str(tmp_path / "missing.sqlite"))
    with pytest.raises(SinkError, match=r"missing\.sqlite.*does not exist"):
        AgentSink("people")


def test_agent_sink_when_pipeline_runs_outside_an_agent_then_one_clear_error_line(tmp_path: Path) -> None:
    # given a pipeline (stage processes) with an agent sink, run by hand
    float_classifier(tmp_path / "classifier.onnx")
    pipeline = tmp_path / "people.yaml"
    pipeline.write_text(
        """name: people
model: {path: classifier.onnx}
preprocess: {resize: [8, 8], layout: nchw, dtype: float32, scale: 0.00392156862745098}
sources: [{uri: "synthetic://?frames=5&size=16x16", name: cam}]
postprocess: {type: classification, output: logits}
sinks: [{type: agent}]
"""
    )
    env = {k: v for k, v in os.environ.items() if k != OUTBOX_ENV}
    env["EDGE_SDK_CACHE_DIR"] = str(tmp_path / "engines")

    # when
    done = subprocess.run([EDGE_SDK, "run", str(pipeline)], capture_output=True, text=True, env=env, timeout=240)

    # then it stops before any stage starts, with one line that says why
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert OUTBOX_ENV in lines[0] and "device agent" in lines[0], lines[0]
