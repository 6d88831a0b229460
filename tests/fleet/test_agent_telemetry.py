"""Live telemetry of a real agent running a real pipeline, as an operator sees it on the shipped fleet broker:
pipeline stats every stats_interval_s, and preview thumbnails when the agent sink asks for them."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from edge_sdk.core.opencv import import_cv2
from edge_sdk.fleet.device.agent import Agent
from edge_sdk.fleet.wire.telemetry import decode_stats
from edge_sdk.mqtt import Message, MqttClient
from tests.fleet.conftest import Keys
from tests.fleet.test_agent_pipelines import install
from tests.support.clients import Inbox
from tools.harness.broker import FleetBroker
from tools.harness.deployments import DEVICE_ID, make_deployment

pytestmark = [pytest.mark.broker, pytest.mark.timeout(180)]

WAIT_S = 60.0
"""Generous: stage processes start slowly on a loaded 2-core machine."""
STATS = f"edge/{DEVICE_ID}/telemetry/stats/people"
PREVIEWS = f"edge/{DEVICE_ID}/telemetry/preview/people/cam"
ASTRONAUT = Path(__file__).resolve().parents[2] / "tools" / "assets" / "astronaut.jpg"


def camera_pipeline(preview: str | None) -> str:
    """The deployed classifier (stage processes) over a live 640x480 camera panning across a photo, to the agent."""
    sink = "{type: agent, include_empty: true" + (f", preview: {preview}" if preview else "") + "}"
    return f"""name: people
model: {{path: classifier.onnx}}
preprocess: {{resize: [8, 8], layout: nchw, dtype: float32, scale: 0.00392156862745098}}
sources:
  - uri: "synthetic://"
    name: cam
    loop: true
    options: {{image: "{ASTRONAUT}", frames: 200, size: 640x480, fps: 20.0, realtime: true}}
postprocess: {{type: classification, output: logits}}
sinks: [{sink}]
"""


@pytest.fixture
def telemetry(fleet: FleetBroker) -> Iterator[Inbox]:
    """The operator's subscription to the device's telemetry."""
    inbox = Inbox()
    with MqttClient(fleet.settings("operator", client_id="operator-telemetry")) as client:
        client.subscribe(f"edge/{DEVICE_ID}/telemetry/#", inbox, qos=0)
        yield inbox


def on(inbox: Inbox, topic: str) -> list[Message]:
    return [message for message in inbox.messages if message.topic == topic]


def wait_for(inbox: Inbox, topic: str, count: int) -> list[Message]:
    inbox.wait(lambda _: len(on(inbox, topic)) >= count, f"{count} messages on {topic}", WAIT_S)
    return on(inbox, topic)


def run_people(agent: Agent, tmp_path: Path, keys: Keys, preview: str | None) -> None:
    deployment = make_deployment(tmp_path / "a", keys.private, 1, pipeline=camera_pipeline(preview))
    assert install(agent, deployment).status == "active"
    agent.set_pipeline("people", running=True)


def test_agent_stats_when_a_pipeline_runs_then_its_rate_and_results_reach_the_operator_about_once_a_second(
    agent: Agent, telemetry: Inbox, tmp_path: Path, operator_keys: Keys
) -> None:
    # given an agent with the default stats_interval_s (1 s), running a pipeline without previews
    assert agent.config.stats_interval_s == 1.0
    run_people(agent, tmp_path, operator_keys, preview=None)

    # when the pipeline has produced results for a while
    wait_for(telemetry, STATS, 1)
    telemetry.wait(
        lambda _: sum(decode_stats(m.payload).fps > 0 for m in on(telemetry, STATS)) >= 3,
        "3 stats with results flowing",
        WAIT_S,
    )
    stats = [decode_stats(message.payload) for message in on(telemetry, STATS)]

    # then each names the device and pipeline; the results count rises, the rate is that of a working pipeline
    assert {(s.device, s.pipeline) for s in stats} == {(DEVICE_ID, "people")}
    frames = [s.frames for s in stats]
    assert frames == sorted(frames) and frames[-1] > frames[0], frames
    assert any(s.fps > 0 and s.latency_p50_ms is not None for s in stats), stats

    # and they come at most once per interval (by the device's own clock), at QoS 0
    assert len(stats) - 1 <= (stats[-1].at - stats[0].at) / 1.0 + 1, [s.at for s in stats]
    assert all(message.qos == 0 and not message.retain for message in on(telemetry, STATS))

    # and without `preview:` no thumbnail is published
    assert [m.topic for m in telemetry.messages if "/telemetry/preview/" in m.topic] == []


def test_agent_preview_when_the_sink_asks_for_it_then_small_changing_jpegs_reach_the_operator(
    agent: Agent, telemetry: Inbox, tmp_path: Path, operator_keys: Keys
) -> None:
    # given a pipeline whose agent sink asks for 160-wide previews every 0.5 s of at most 8 KiB
    run_people(agent, tmp_path, operator_keys, preview="{every_s: 0.5, width: 160, max_bytes: 8192}")

    # when it runs, then thumbnails of the camera arrive on telemetry/preview/<pipeline>/<source>
    messages = wait_for(telemetry, PREVIEWS, 4)
    cv2 = import_cv2()
    images = []
    for message in messages:
        assert len(message.payload) <= 8192 and message.qos == 0 and not message.retain
        image = cv2.imdecode(np.frombuffer(message.payload, np.uint8), cv2.IMREAD_COLOR)
        assert image is not None and image.shape == (120, 160, 3), "160 wide, the camera's 4:3 kept"
        images.append(image.astype(np.int16))

    # and they follow the moving camera (its path is symmetric: two frames either side of a turning
    # point look the same, so one pair of thumbnails in a row may match)
    changed = [np.abs(a - b).mean() > 1.0 for a, b in itertools.pairwise(images)]
    assert sum(changed) >= len(changed) - 1, changed
    assert agent.results.previews_published >= len(messages)
