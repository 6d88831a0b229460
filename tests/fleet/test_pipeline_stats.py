"""The agent's live pipeline stats: what a snapshot becomes, how often it goes out, and that it never fails a pipeline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from edge_sdk.core.errors import ConfigError
from edge_sdk.fleet.device.agent import Agent
from edge_sdk.fleet.device.agent_config import AgentConfig, load_agent_config
from edge_sdk.fleet.device.pipeline_stats import StatsPublisher
from edge_sdk.fleet.wire.telemetry import decode_stats
from edge_sdk.mqtt import MqttSettings, NotConnectedError
from edge_sdk.mqtt.publishing import Payload
from edge_sdk.mqtt.topics import DeviceTopics
from edge_sdk.pipeline.snapshot import RuntimeSnapshot, StageView
from tests.fleet.conftest import Keys
from tests.fleet.test_agent_pipelines import install, wait_for_lines
from tests.support.clients import RecordingClient
from tools.harness.deployments import DEVICE_ID, PROFILE, make_deployment


class Client:
    def __init__(self) -> None:
        self.settings = MqttSettings()
        self.is_connected = True
        self.published: list[tuple[str, bytes, dict[str, Any]]] = []
        self.fail = False

    def publish(self, topic: str, payload: Payload = None, **options: Any) -> None:
        if self.fail:
            raise NotConnectedError("the broker went away")
        assert isinstance(payload, bytes)
        self.published.append((topic, payload, options))


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def snapshot(frames: int, fps: float, p50: float = 8.0) -> RuntimeSnapshot:
    return RuntimeSnapshot(
        stages=[
            StageView("capture:cam", "capture", frames=frames + 5, fps=fps + 1),
            StageView("inference:0", "inference", frames=frames + 2, fps=fps + 0.5),
            StageView("output", "output", frames=frames, fps=fps),
        ],
        rings={"cam": {"free": 3, "dropped": 4}, "door": {"free": 2, "dropped": 1}},
        latency_p50_ms=p50,
        latency_p99_ms=p50 * 2,
        elapsed=3.0,
    )


def test_stats_when_snapshots_come_every_half_second_then_one_message_per_interval_with_the_output_stage_figures() -> (
    None
):
    client, clock = Client(), Clock()
    publisher = StatsPublisher(client, DeviceTopics("cam-a"), interval_s=1.0, clock=clock)

    # when the runtime hands 6 snapshots, 0.5 s apart (3 s)
    for step in range(6):
        publisher.publish("people", snapshot(frames=10 * step, fps=19.5))
        clock.now += 0.5

    # then 3 went out, at QoS 0, not retained, on telemetry/stats/<pipeline>
    assert len(client.published) == 3 and publisher.published == 3
    assert {topic for topic, _, _ in client.published} == {"edge/cam-a/telemetry/stats/people"}
    assert all(options == {"qos": 0, "retain": False, "wait": False} for _, _, options in client.published)
    stats = [decode_stats(payload) for _, payload, _ in client.published]
    assert [s.frames for s in stats] == [0, 20, 40], "the output stage's results, not the capture's frames"
    assert {(s.device, s.pipeline, s.fps, s.dropped) for s in stats} == {("cam-a", "people", 19.5, 5)}
    assert stats[0].latency_p50_ms == 8.0 and stats[0].latency_p99_ms == 16.0 and stats[0].at > 1e9


def test_stats_before_any_result_then_latency_is_null_and_pipelines_are_paced_apart() -> None:
    client, clock = Client(), Clock()
    publisher = StatsPublisher(client, DeviceTopics("cam-a"), interval_s=1.0, clock=clock)
    publisher.publish("people", snapshot(frames=0, fps=0.0, p50=float("nan")))
    publisher.publish("door", snapshot(frames=0, fps=0.0))
    first = decode_stats(client.published[0][1])
    assert first.latency_p50_ms is None and first.latency_p99_ms is None and first.fps == 0
    assert [topic.rsplit("/", 1)[1] for topic, _, _ in client.published] == ["people", "door"]


def test_stats_when_offline_or_publishing_fails_then_nothing_is_raised_into_the_pipeline() -> None:
    client, clock = Client(), Clock()
    publisher = StatsPublisher(client, DeviceTopics("cam-a"), interval_s=1.0, clock=clock)
    client.is_connected = False
    publisher.publish("people", snapshot(10, 20.0))  # not spooled: a stale rate is worth nothing
    client.is_connected, client.fail = True, True
    clock.now += 1.0
    publisher.publish("people", snapshot(20, 20.0))
    clock.now += 1.0
    publisher.publish("not a name!", snapshot(30, 20.0))  # a bug of ours (the wire refuses the name): logged
    assert client.published == [] and publisher.published == 0


def test_agent_config_stats_interval_defaults_to_one_second_and_refuses_negative_values(tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text("device_id: cam-a\nbroker: {host: localhost}\nstore_dir: store\n")
    assert load_agent_config(path).stats_interval_s == 1.0
    path.write_text("device_id: cam-a\nbroker: {host: localhost}\nstore_dir: store\nstats_interval_s: -1\n")
    with pytest.raises(ConfigError, match=r"agent\.yaml:4: key 'stats_interval_s'.*greater than or equal to 0"):
        load_agent_config(path)


@pytest.mark.timeout(120)
def test_agent_stats_when_interval_is_0_then_a_running_pipeline_publishes_none(
    tmp_path: Path, operator_keys: Keys
) -> None:
    # given an agent with stats off, running a pipeline (stage processes) at 20 frames a second
    config = AgentConfig(
        device_id=DEVICE_ID,
        broker=MqttSettings(client_id=DEVICE_ID),
        store_dir=tmp_path / "store",
        trusted_keys_dir=operator_keys.folder,
        profile=PROFILE,
        engine_cache_dir=tmp_path / "engines",
        stats_interval_s=0,
    )
    agent = Agent(config, client=RecordingClient)
    results = tmp_path / "results.jsonl"
    pipeline = f"""name: people
model: {{path: classifier.onnx}}
preprocess: {{resize: [8, 8], layout: nchw, dtype: float32, scale: 0.00392156862745098}}
sources: [{{uri: "synthetic://?frames=100000&size=16x16&fps=20&realtime=true", name: cam}}]
postprocess: {{type: classification, output: logits}}
sinks: [{{type: jsonl, path: "{results}"}}]
"""
    try:
        assert (
            install(agent, make_deployment(tmp_path / "a", operator_keys.private, 1, pipeline=pipeline)).status
            == "active"
        )
        agent.set_pipeline("people", running=True)

        # when it has made 60 results (3 s, several stats intervals of the default)
        assert wait_for_lines(results, 60, timeout=60) >= 60

        # then no stats were published
        client = agent.client
        assert isinstance(client, RecordingClient)
        assert [topic for topic, _, _ in client.published if "/telemetry/stats/" in topic] == []
    finally:
        agent.pipelines.stop_all()
        agent.deployer.close()
