"""The device agent against a real Mosquitto with the shipped fleet config (TLS client certificates + ACL)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from edge_sdk.fleet.device.agent import Agent
from edge_sdk.fleet.device.agent_config import AgentConfig
from edge_sdk.fleet.wire.protocol import (
    MAX_COMMAND_BYTES,
    MAX_RESPONSE_BYTES,
    Command,
    DesiredState,
    Presence,
    ReportedState,
    Response,
    decode_presence,
    decode_reported,
    decode_response,
    encode_message,
    new_command,
)
from edge_sdk.mqtt import ConnectionState, MqttClient
from edge_sdk.mqtt.topics import DeviceTopics
from tests.fleet.conftest import Keys
from tests.support.clients import Inbox
from tests.support.waits import poll_until
from tools.harness.broker import FleetBroker
from tools.harness.deployments import DEVICE_ID, PROFILE, Deployment, make_deployment

pytestmark = [pytest.mark.broker, pytest.mark.timeout(90)]

TOPICS = DeviceTopics(DEVICE_ID)
WAIT_S = 20.0


@pytest.fixture
def config(fleet: FleetBroker, tmp_path: Path, operator_keys: Keys) -> AgentConfig:
    return AgentConfig(
        device_id=DEVICE_ID,
        broker=fleet.settings(DEVICE_ID, client_id=DEVICE_ID, clean_start=False, keepalive_s=5),
        store_dir=tmp_path / "store",
        trusted_keys_dir=operator_keys.folder,
        profile=PROFILE,
        labels={"site": "lyon"},
        engine_cache_dir=tmp_path / "engines",
    )


class Operator:
    """The operator's side of the protocol, just enough for these tests."""

    def __init__(self, client: MqttClient):
        self.client = client
        self.responses, self.state, self.reported = Inbox(), Inbox(), Inbox()
        client.subscribe(TOPICS.resp, self.responses, qos=1)
        client.subscribe(TOPICS.state, self.state, qos=1)
        client.subscribe(TOPICS.reported, self.reported, qos=1)

    def send(self, command: Command | bytes, correlation: bytes) -> Response:
        payload = command if isinstance(command, bytes) else encode_message(command)
        self.client.publish(TOPICS.cmd, payload, qos=1, response_topic=TOPICS.resp, correlation_data=correlation)
        message = self.responses.wait(lambda m: m.correlation_data == correlation, f"a response to {correlation!r}")
        return decode_response(message.payload)

    def request(self, name: str, **args: Any) -> Response:
        command = new_command(name, args)
        response = self.send(command, command.id.encode())
        assert response.id == command.id and response.name == name and response.device == DEVICE_ID
        return response

    def send_chunks(self, deployment: Deployment) -> None:
        for suffix, payload in deployment.chunks():
            self.client.publish(TOPICS.artifacts(*suffix.split("/")), payload, qos=1)

    def presence(self, predicate: Callable[[Presence], bool], what: str) -> Presence:
        message = self.state.wait(lambda m: predicate(decode_presence(m.payload)), what)
        return decode_presence(message.payload)

    def report(self, predicate: Callable[[ReportedState], bool], what: str) -> ReportedState:
        message = self.reported.wait(lambda m: predicate(decode_reported(m.payload)), what)
        return decode_reported(message.payload)


@pytest.fixture
def operator(fleet: FleetBroker) -> Iterator[Operator]:
    with MqttClient(fleet.settings("operator", client_id="operator-console")) as client:
        yield Operator(client)


def retained_presence(operator: Operator) -> Presence:
    """What a subscriber that comes now receives on the state topic (the retained message)."""
    watch = Inbox()
    operator.client.unsubscribe(TOPICS.state)
    operator.client.subscribe(TOPICS.state, watch, qos=1)
    message = watch.wait(lambda m: True, "the retained presence")
    assert message.retain, "presence is retained"
    return decode_presence(message.payload)


@pytest.fixture
def agent(config: AgentConfig) -> Iterator[Agent]:
    with Agent(config) as running:
        yield running


def test_agent_when_connected_then_retained_presence_and_ping_report_answer_with_correlation_id(
    agent: Agent, operator: Operator
) -> None:
    presence = operator.presence(lambda p: p.online, "online presence")
    assert (presence.profile, presence.labels, presence.active_version) == (PROFILE, {"site": "lyon"}, None)
    assert presence.sdk_version and presence.health == "ok"
    assert retained_presence(operator).online, "a late subscriber sees the retained online presence"

    pong = operator.request("ping", echo="hello")
    assert pong.ok and pong.result is not None and pong.result["echo"] == "hello"
    report = operator.request("report")
    assert report.ok and report.result is not None
    assert report.result["presence"]["device"] == DEVICE_ID and report.result["reported"]["applied_revision"] == 0


def test_agent_when_commands_are_malformed_unknown_or_oversized_then_answered_and_agent_keeps_running(
    agent: Agent, operator: Operator
) -> None:
    malformed = operator.send(b'{"id": "x", "name": ', b"corr-1")
    assert not malformed.ok and malformed.error is not None and malformed.error.reason == "bad_request"
    oversized = operator.send(b'{"id":"y","name":"ping","args":{"pad":"' + b"x" * MAX_COMMAND_BYTES + b'"}}', b"c2")
    assert oversized.error is not None and oversized.error.detail == "oversized"
    unknown = operator.request("reboot")
    assert unknown.error is not None and unknown.error.reason == "unknown_command"
    bad_args = operator.request("deploy", manifest=42)
    assert bad_args.error is not None and bad_args.error.reason == "bad_request"
    assert operator.request("ping").ok, "the agent still answers after bad input"


def test_agent_when_ping_echo_is_huge_then_a_short_refusal_reaches_the_operator(
    agent: Agent, operator: Operator
) -> None:
    # given an online agent; when a ping carries an echo larger than a response may be
    operator.presence(lambda p: p.online, "online presence")
    refused = operator.request("ping", echo="x" * (MAX_RESPONSE_BYTES + 1))

    # then the operator gets an answer it can decode (decode_response holds it to the limit): a refusal
    assert not refused.ok and refused.error is not None and refused.error.detail == "oversized"
    assert operator.request("ping", echo="small").ok


def test_agent_when_a_command_is_retained_on_cmd_then_no_start_runs_or_answers_it_and_live_commands_work(
    config: AgentConfig, operator: Operator, caplog: pytest.LogCaptureFixture
) -> None:
    # given a retained command with a side effect on the device's cmd topic, before the agent ever started
    retained = new_command("set_profile", {"profile": "arm-cpu"})
    operator.client.publish(
        TOPICS.cmd, encode_message(retained), qos=1, retain=True, response_topic=TOPICS.resp, correlation_data=b"r"
    )

    for start in ("first start", "restart"):
        caplog.clear()
        # when the agent starts (the broker hands it the retained command on subscribing), then restarts
        with caplog.at_level(logging.WARNING, logger="edge_sdk.fleet.device.agent"), Agent(config) as agent:
            assert agent.client.wait_for_state(ConnectionState.CONNECTED, WAIT_S), f"the agent connects ({start})"
            # then a live command sent after it is still run and answered (and, being handled in arrival
            # order, proves the retained one was handled before it)
            assert operator.request("ping", echo=start).ok, f"a live command is answered ({start})"
            assert agent.profile.name == PROFILE, f"the retained set_profile did not run ({start})"
            assert agent.state.profile is None, f"nothing was recorded for the retained command ({start})"
        # (the broker may deliver it twice when a subscription made while connecting is sent again on CONNACK)
        ignored = [r for r in caplog.records if "ignored a retained command" in r.getMessage()]
        assert ignored, f"the retained command was delivered and ignored with a warning ({start})"
        assert all(r.levelno == logging.WARNING and "\n" not in r.getMessage() for r in ignored), "one line each"
    assert not [m for m in operator.responses.messages if m.correlation_data == b"r"], "it was never answered"


def test_agent_when_start_stop_and_set_profile_then_presence_follows(agent: Agent, operator: Operator) -> None:
    missing = operator.request("start", pipeline="people")
    assert missing.error is not None and missing.error.reason == "pipeline_failed", "no version carries 'people'"
    assert operator.request("stop", pipeline="people").result == {"pipelines": []}
    unknown = operator.request("set_profile", profile="no-such-profile")
    assert unknown.error is not None and unknown.error.detail == "unknown-profile"
    assert operator.request("set_profile", profile="arm-cpu").ok
    operator.presence(lambda p: p.profile == "arm-cpu", "presence with the new profile")


def test_agent_when_signed_inline_deploy_then_active_and_bad_ones_refused_or_rolled_back(
    agent: Agent, operator: Operator, tmp_path: Path, operator_keys: Keys, stranger_keys: Keys
) -> None:
    # given a signed deployment of the classifier with a passing health check
    good = make_deployment(tmp_path / "good", operator_keys.private, 1)

    # when the operator sends it, then the chunks it asks for, then the same deploy again
    first = operator.request("deploy", manifest=good.signed.decode())
    assert first.ok and first.result is not None and first.result["status"] == "need_chunks"
    assert set(first.result["missing"]) == set(good.files)
    operator.send_chunks(good)
    done = operator.request("deploy", manifest=good.signed.decode())

    # then
    assert done.ok and done.result is not None and done.result["status"] == "active", done.error
    assert done.result["version"] == 1
    operator.presence(lambda p: p.active_version == 1 and p.models == ["classifier.onnx"], "presence on version 1")
    operator.report(lambda r: r.last_deploy is not None and r.last_deploy.outcome == "active", "reported active")

    # when a version whose health check fails is deployed, then the device rolls back and says why
    bad = make_deployment(tmp_path / "bad", operator_keys.private, 2, expected_offset=1.0)
    operator.request("deploy", manifest=bad.signed.decode())
    operator.send_chunks(bad)
    failed = operator.request("deploy", manifest=bad.signed.decode())
    assert failed.error is not None and failed.error.reason == "health_failed", failed
    assert failed.result is not None and failed.result["active_version"] == 1
    reported = operator.report(
        lambda r: r.last_deploy is not None and r.last_deploy.outcome == "rolled_back", "reported rolled back"
    )
    assert reported.active_version == 1 and "logits" in (reported.last_deploy.reason or "")  # type: ignore[union-attr]

    # when forged or mistargeted manifests come, then they are refused and version 1 keeps running
    forged = make_deployment(tmp_path / "forged", stranger_keys.private, 3)
    mistargeted = make_deployment(tmp_path / "other", operator_keys.private, 3, target={"device_ids": ["cam-b"]})
    for signed, detail in ((forged.signed, "untrusted-key"), (mistargeted.signed, "wrong-target")):
        refused = operator.request("deploy", manifest=signed.decode())
        assert refused.error is not None and (refused.error.reason, refused.error.detail) == ("refused", detail)
    assert agent.store.current_version() == 1
    assert operator.request("report").result["presence"]["active_version"] == 1  # type: ignore[index]


def test_agent_when_desired_state_changed_while_offline_then_converges_on_reconnect(
    config: AgentConfig, operator: Operator, tmp_path: Path, operator_keys: Keys
) -> None:
    # given an agent that was online once, then went away
    with Agent(config):
        operator.presence(lambda p: p.online, "online presence")
    operator.presence(lambda p: not p.online, "offline presence after a clean stop")

    # when the operator sets a desired state while it is offline
    deployment = make_deployment(tmp_path / "d", operator_keys.private, 1)
    desired = DesiredState(revision=1, deployment=deployment.signed.decode(), pipelines=["people"])
    operator.client.publish(TOPICS.desired, encode_message(desired), qos=1, retain=True)

    # then on reconnect the device takes it up, asks for the chunks, and converges once they came
    with Agent(config) as agent:
        pending = operator.report(
            lambda r: r.last_deploy is not None and r.last_deploy.outcome == "pending", "a pending deployment"
        )
        assert "need_chunks" in (pending.last_deploy.reason or "")  # type: ignore[union-attr]
        operator.send_chunks(deployment)
        reported = operator.report(lambda r: r.applied_revision == 1, "desired revision 1 applied")
        assert reported.active_version == 1
        assert agent.state.pipelines == ["people"], "the desired pipelines are wanted (this version has none)"
        assert agent.store.current_version() == 1
        operator.presence(lambda p: p.online and p.active_version == 1, "presence on version 1")


def test_agent_when_process_is_killed_then_last_will_marks_it_offline(
    config: AgentConfig, operator: Operator, tmp_path: Path
) -> None:
    # given an agent process started from its YAML config
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(json.loads(config.model_dump_json())))
    process = subprocess.Popen(
        [sys.executable, "-c", "from edge_sdk.cli.agent_commands import agent; agent()", "--config", str(path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        operator.presence(lambda p: p.online, "online presence from the agent process")
        before = len(operator.state.messages)

        # when it is killed without a chance to say goodbye
        process.kill()
        process.wait(timeout=10)

        # then the broker publishes its retained offline will
        offline = operator.state.wait(
            lambda m: operator.state.messages.index(m) >= before and not decode_presence(m.payload).online,
            "the offline last will",
        )
        assert decode_presence(offline.payload).device == DEVICE_ID
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    assert retained_presence(operator).online is False, "a late subscriber sees the retained offline will"


def test_agent_when_broker_restarts_then_it_reconnects_republishes_presence_and_answers(
    agent: Agent, operator: Operator, fleet: FleetBroker
) -> None:
    # given an online agent
    operator.presence(lambda p: p.online, "online presence")
    connects = agent.client.connects

    # when the broker restarts
    fleet.broker.restart()

    # then the agent reconnects with back-off, publishes its facts again and takes commands
    assert operator.client.wait_for_state(ConnectionState.CONNECTED, WAIT_S), "the operator reconnects"
    poll_until(lambda: agent.client.connects != connects, WAIT_S, interval=0.05)
    assert agent.client.connects > connects, "the agent reconnected"
    assert operator.request("ping").ok
    assert retained_presence(operator).online
