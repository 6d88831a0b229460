"""A deployed pipeline's circuit breaker reaches the operator: its model_breaker events go to telemetry."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edge_sdk.core.opencv import import_cv2
from edge_sdk.fleet.device.agent import Agent
from tests.fleet.conftest import Keys
from tests.fleet.test_agent_pipelines import install
from tests.support.clients import recording_client
from tests.support.waits import poll_until
from tools.harness.deployments import DEVICE_ID, make_deployment
from tools.harness.governed_models import failing_when_red

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


@pytest.fixture
def agent(pipeline_agent: Agent) -> Agent:
    return pipeline_agent


def breaker_pipeline(folder: Path) -> str:
    """The deployed classifier as the fallback of a primary that fails on red frames, over a live
    camera sweeping a half-red image (grey, then red frames, every 2 s)."""
    primary = failing_when_red(folder / "failing.onnx")
    image = np.full((100, 400, 3), 128, np.uint8)
    image[:, :200] = (0, 0, 255)
    assert import_cv2().imwrite(str(folder / "half_red.png"), image)
    return f"""name: people
model: {{path: "{primary}"}}
fallback: {{path: classifier.onnx, breaker: {{consecutive_errors: 2, ejection_s: 60}}}}
preprocess: {{resize: [8, 8], layout: nchw, dtype: float32, scale: 0.00392156862745098}}
sources:
  - uri: "synthetic://"
    name: cam
    loop: true
    options: {{image: "{folder / "half_red.png"}", frames: 40, size: 64x48, fps: 20.0, realtime: true}}
postprocess: {{type: classification, output: logits}}
sinks: [{{type: jsonl, path: "{folder / "results.jsonl"}"}}]
runtime: {{mode: inline}}
"""


def test_a_deployed_pipelines_breaker_opening_goes_to_the_agents_telemetry(
    agent: Agent, tmp_path: Path, operator_keys: Keys
) -> None:
    # given a deployed pipeline whose primary fails on red frames, started by the agent
    pipeline = breaker_pipeline(tmp_path)
    deployment = make_deployment(tmp_path / "a", operator_keys.private, 1, pipeline=pipeline)
    assert install(agent, deployment).status == "active"
    assert agent.set_pipeline("people", running=True) == ["people"]
    client = recording_client(agent)
    topic = agent.topics.telemetry("pipelines", "people")

    def breaker_events() -> list[dict[str, Any]]:
        events = [json.loads(payload) for sent, payload, _ in client.published if sent == topic]
        return [event for event in events if event["kind"] == "model_breaker"]

    # when the camera's frames turn red, then the breaker's opening is published with why
    poll_until(lambda: bool(breaker_events()), 30, interval=0.1)
    event = breaker_events()[0]
    assert event["device"] == DEVICE_ID and event["pipeline"] == "people" and event["subject"] == "people"
    assert event["state"] == "open" and event["previous"] == "closed"
    assert event["message"] == "opened (2 errors in a row); frames go to the fallback model for 60 s"
