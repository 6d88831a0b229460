"""The agent's command path without a broker: every payload, however broken, gets one answer and no crash."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edge_sdk.fleet.device.agent import Agent
from edge_sdk.fleet.device.agent_config import AgentConfig
from edge_sdk.fleet.device.commands import COMMANDS, MAX_ECHO_BYTES
from edge_sdk.fleet.wire.protocol import (
    COMMAND_NAMES,
    MAX_RESPONSE_BYTES,
    Response,
    decode_response,
    encode_message,
    new_command,
)
from edge_sdk.mqtt import Message, MqttSettings
from tests.fleet.conftest import Keys
from tests.support.clients import RecordingClient, recording_client
from tools.harness.deployments import DEVICE_ID, PROFILE


@pytest.fixture
def agent(tmp_path: Path, operator_keys: Keys) -> Iterator[Agent]:
    config = AgentConfig(
        device_id=DEVICE_ID,
        broker=MqttSettings(client_id=DEVICE_ID, clean_start=False),
        store_dir=tmp_path / "store",
        trusted_keys_dir=operator_keys.folder,
        profile=PROFILE,
        max_command_bytes=4096,
    )
    agent = Agent(config, client=RecordingClient)
    yield agent
    agent.deployer.close()


def answer(agent: Agent, payload: bytes, correlation: bytes | None = b"c") -> Response:
    client = recording_client(agent)
    before = len(client.published)
    agent._command(Message(topic=agent.topics.cmd, payload=payload, qos=1, retain=False, correlation_data=correlation))
    answers = [p for p in client.published[before:] if p[0] == agent.topics.resp]
    assert len(answers) == 1, f"expected exactly one answer, got {answers}"
    assert answers[0][2] == correlation, "the answer carries the command's correlation data"
    return decode_response(answers[0][1])


def test_agent_settings_when_built_then_offline_will_is_retained_on_the_state_topic(agent: Agent) -> None:
    will = agent.client.settings.will
    assert will is not None and will.topic == agent.topics.state and will.retain and will.qos == 1
    assert '"online":false' in will.payload.replace(" ", "")


def test_agent_command_when_too_large_for_the_config_then_refused_as_oversized(agent: Agent) -> None:
    response = answer(agent, encode_message(new_command("ping", {"pad": "x" * 5000})))
    assert response.error is not None and response.error.detail == "oversized"


def test_agent_command_when_it_arrives_retained_then_not_run_and_not_answered(
    agent: Agent, caplog: pytest.LogCaptureFixture
) -> None:
    # given a command that arrives with the retain flag (the broker replays it at every subscription)
    client = recording_client(agent)
    payload = encode_message(new_command("set_profile", {"profile": "arm-cpu"}))
    message = Message(topic=agent.topics.cmd, payload=payload, qos=1, retain=True, correlation_data=b"c")

    # when the agent handles it
    with caplog.at_level(logging.WARNING, logger="edge_sdk.fleet.device.agent"):
        agent._command(message)

    # then it did nothing but log one warning line; the same command, not retained, runs
    assert client.published == [], "a retained command is not answered"
    assert agent.profile.name == PROFILE and agent.state.profile is None, "a retained command is not run"
    assert [r.levelno for r in caplog.records] == [logging.WARNING], "one warning line"
    assert "retained" in caplog.records[0].getMessage()
    assert answer(agent, payload).ok and agent.profile.name == "arm-cpu"


@pytest.fixture
def roomy_agent(tmp_path: Path, operator_keys: Keys) -> Iterator[Agent]:
    """An agent with the default command limit, which is larger than the response limit."""
    config = AgentConfig(
        device_id=DEVICE_ID,
        broker=MqttSettings(client_id=DEVICE_ID, clean_start=False),
        store_dir=tmp_path / "roomy-store",
        trusted_keys_dir=operator_keys.folder,
        profile=PROFILE,
    )
    assert config.max_command_bytes > MAX_RESPONSE_BYTES, "a command can carry more than a response may"
    agent = Agent(config, client=RecordingClient)
    yield agent
    agent.deployer.close()


def answer_bytes(agent: Agent, payload: bytes) -> bytes:
    client = recording_client(agent)
    before = len(client.published)
    agent._command(Message(topic=agent.topics.cmd, payload=payload, qos=1, retain=False, correlation_data=b"c"))
    answers = [p[1] for p in client.published[before:] if p[0] == agent.topics.resp]
    assert len(answers) == 1, f"expected exactly one answer, got {len(answers)}"
    return answers[0]


def test_ping_when_echo_is_over_its_limit_then_refused_in_an_answer_within_the_response_limit(
    roomy_agent: Agent,
) -> None:
    # given a ping whose echo is larger than any response may be (but fits in a command)
    huge = encode_message(new_command("ping", {"echo": "x" * (MAX_RESPONSE_BYTES + 1)}))

    # when the agent answers it
    payload = answer_bytes(roomy_agent, huge)

    # then the answer is a short refusal, not a giant echo, and an echo within the limit is still echoed
    assert len(payload) <= MAX_RESPONSE_BYTES, f"the answer is within the response limit, got {len(payload)} bytes"
    response = decode_response(payload)
    assert not response.ok and response.error is not None
    assert (response.error.reason, response.error.detail) == ("bad_request", "oversized")
    assert str(MAX_ECHO_BYTES) in response.error.message, response.error.message
    echo = "y" * (MAX_ECHO_BYTES - 2)  # the JSON string with its quotes is exactly the limit
    fitting = decode_response(answer_bytes(roomy_agent, encode_message(new_command("ping", {"echo": echo}))))
    assert fitting.ok and fitting.result is not None and fitting.result["echo"] == echo


def test_agent_response_when_a_result_is_over_the_response_limit_then_an_oversized_error_within_it(
    roomy_agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a command whose handler returns more than a response may carry
    monkeypatch.setitem(COMMANDS, "report", lambda agent, args: {"blob": "z" * MAX_RESPONSE_BYTES})

    # when the agent answers it
    payload = answer_bytes(roomy_agent, encode_message(new_command("report")))

    # then the operator gets an answer it can read: the same command, failed as oversized
    assert len(payload) <= MAX_RESPONSE_BYTES, f"the answer is within the response limit, got {len(payload)} bytes"
    response = decode_response(payload)
    assert (response.name, response.ok, response.result) == ("report", False, None)
    assert response.error is not None and (response.error.reason, response.error.detail) == ("internal", "oversized")


def test_ping_when_echo_holds_a_lone_surrogate_then_answered_with_it(agent: Agent) -> None:
    # given a ping whose echo is a lone surrogate (valid JSON, not valid UTF-8 once decoded)
    payload = b'{"id":"s","name":"ping","args":{"echo":"\\ud800"}}'

    # when / then it is answered (JSON escapes), with the echo intact
    response = answer(agent, payload)
    assert response.ok and response.result is not None and response.result["echo"] == "\ud800"


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(
    st.binary(max_size=512)
    | st.builds(
        lambda name, args: encode_message(new_command(name, args)),
        st.sampled_from(COMMAND_NAMES) | st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,11}", fullmatch=True),
        st.dictionaries(
            st.sampled_from(["manifest", "pipeline", "profile", "echo"]) | st.text(max_size=8),
            st.none() | st.integers() | st.text(max_size=16) | st.lists(st.integers(), max_size=3),
            max_size=3,
        ),
    )
)
def test_agent_command_when_fuzzed_then_exactly_one_answer_and_no_crash(agent: Agent, payload: bytes) -> None:
    response = answer(agent, payload)
    assert response.device == DEVICE_ID
    if not response.ok:
        assert response.error is not None and response.error.reason in (
            "bad_request",
            "unknown_command",
            "refused",
            "deploy_failed",
            "pipeline_failed",
        ), response.error


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(
    payload=st.binary(max_size=256)
    | st.builds(
        lambda revision, deployment: json.dumps({"revision": revision, "deployment": deployment}).encode(),
        st.integers(min_value=-2, max_value=2**70),
        st.none() | st.text(max_size=64),
    ),
    suffix=st.text(alphabet="0123456789abc./-", max_size=24),
)
def test_agent_desired_and_chunks_when_fuzzed_then_refused_quietly(agent: Agent, payload: bytes, suffix: str) -> None:
    agent._on_desired(Message(topic=agent.topics.desired, payload=payload, qos=1, retain=True))
    agent._chunk(Message(topic=agent.topics.artifacts(*suffix.split("/")), payload=payload, qos=1, retain=False))
    assert agent.store.current_version() is None
    assert agent.deployer.pending_versions() == [], "nothing is received without a verified manifest"
