"""`type: agent` sinks: results of the pipelines the agent runs reach the operator on the shipped fleet broker."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from edge_sdk.fleet.device.agent import Agent
from edge_sdk.mqtt import Message, MqttClient
from tests.fleet.conftest import Keys
from tests.fleet.test_agent_pipelines import install
from tests.support.clients import Inbox
from tests.support.waits import poll_until
from tools.harness.broker import FleetBroker
from tools.harness.deployments import DEVICE_ID, make_deployment

pytestmark = [pytest.mark.broker, pytest.mark.timeout(120)]

WAIT_S = 30.0
RESULTS = f"edge/{DEVICE_ID}/results/people/cam"


def agent_pipeline(frames: int, jsonl: Path) -> str:
    """The deployed classifier over a live synthetic camera of `frames` frames, results to the agent and to `jsonl`.

    A live camera may drop frames (e.g. while the stages start): the JSONL file says which were processed.
    """
    return f"""name: people
model: {{path: classifier.onnx}}
preprocess: {{resize: [8, 8], layout: nchw, dtype: float32, scale: 0.00392156862745098}}
sources: [{{uri: "synthetic://?frames={frames}&size=16x16&fps=20&realtime=true", name: cam}}]
postprocess: {{type: classification, output: logits}}
sinks: [{{type: agent}}, {{type: jsonl, path: "{jsonl}"}}]
"""


@pytest.fixture
def results(fleet: FleetBroker) -> Iterator[Inbox]:
    """The operator's subscription to the device's results (a persistent session: kept across broker restarts)."""
    inbox = Inbox()
    settings = fleet.settings("operator", client_id="operator-results", clean_start=False)
    with MqttClient(settings) as client:
        client.subscribe(f"edge/{DEVICE_ID}/results/#", inbox, qos=1)
        yield inbox


def frame_indices(messages: list[Message]) -> list[int]:
    return [json.loads(message.payload)["frame"] for message in messages]


def processed_frames(jsonl: Path) -> list[int]:
    return [json.loads(line)["frame"] for line in jsonl.read_text().splitlines()]


def test_agent_sink_when_pipeline_runs_then_each_frame_result_reaches_the_operator(
    agent: Agent, results: Inbox, tmp_path: Path, operator_keys: Keys
) -> None:
    # given a deployed pipeline whose sink is the agent (output stage in its own process)
    jsonl = tmp_path / "processed.jsonl"
    deployment = make_deployment(tmp_path / "a", operator_keys.private, 1, pipeline=agent_pipeline(20, jsonl))
    assert install(agent, deployment).status == "active"

    # when the agent runs it to its end
    agent.set_pipeline("people", running=True)
    assert agent.pipelines._runs["people"].ended.wait(WAIT_S), "the pipeline ends after its 20 frames"
    processed = processed_frames(jsonl)
    assert len(processed) >= 10, processed

    # then one result per processed frame arrives, in order, on edge/<device>/results/<pipeline>/<source>
    messages = results.wait_for(len(processed), WAIT_S)
    assert {message.topic for message in messages} == {RESULTS}
    assert frame_indices(messages) == processed
    first = json.loads(messages[0].payload)
    assert first["source"] == "cam" and first["classifications"], first
    assert poll_until(lambda: agent.results.stats().waiting == 0, WAIT_S, interval=0.05)
    assert results.settle(0.5) == messages, "nothing more than one result per frame"
    stats = agent.results.stats()
    assert stats.published == len(processed) and stats.evicted == 0 and stats.rejected == 0, stats


def test_agent_sink_when_broker_stops_during_the_run_then_results_are_kept_and_delivered_in_order(
    agent: Agent, fleet: FleetBroker, results: Inbox, tmp_path: Path, operator_keys: Keys
) -> None:
    # given a running pipeline of 60 frames (3 s) whose first results reached the operator
    jsonl = tmp_path / "processed.jsonl"
    deployment = make_deployment(tmp_path / "a", operator_keys.private, 1, pipeline=agent_pipeline(60, jsonl))
    assert install(agent, deployment).status == "active"
    agent.set_pipeline("people", running=True)
    assert len(results.wait_for(3, WAIT_S)) == 3, "the first results arrive"

    # when the broker stops while the pipeline goes on to its end
    fleet.broker.stop()
    run = agent.pipelines._runs["people"]
    assert run.ended.wait(WAIT_S), "the pipeline ends after its 60 frames"
    waiting = agent.results.stats().waiting
    assert waiting > 0, "results made while the broker is away wait in the outbox"

    # then, once the broker is back, every processed frame's result arrives, in order
    fleet.broker.start()
    processed = processed_frames(jsonl)
    assert len(processed) > waiting
    assert len(results.wait_for(len(processed), WAIT_S)) == len(processed)
    indices = frame_indices(results.settle(0.5))
    assert list(dict.fromkeys(indices)) == processed, f"every frame once, in order (at least once): {indices}"
    assert agent.results.stats().waiting == 0
