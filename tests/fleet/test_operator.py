"""FleetOperator against simulated devices on the shipped fleet broker (TLS client certificates, ACL)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from edge_sdk.core.errors import CommandTimeoutError
from edge_sdk.fleet.operator.client import FleetOperator
from edge_sdk.fleet.wire.protocol import decode_desired
from edge_sdk.mqtt import MqttClient
from edge_sdk.mqtt.topics import DeviceTopics
from tools.harness.broker import BrokerFactory, FleetBroker, start_fleet_broker
from tools.harness.fleet_sim import SimDevice, signed_deployment

from .conftest import Keys

pytestmark = pytest.mark.broker

DEVICES = ["cam-1", "cam-2", "cam-3"]


@pytest.fixture
def fleet(start_broker: BrokerFactory) -> FleetBroker:
    return start_fleet_broker(start_broker, devices=DEVICES, operators=["operator"])


@pytest.fixture
def operator(fleet: FleetBroker) -> Iterator[FleetOperator]:
    client = MqttClient(fleet.settings("operator"))
    client.connect()
    with FleetOperator(client) as op:
        yield op
    client.disconnect()


@pytest.fixture
def devices(fleet: FleetBroker) -> Iterator[list[SimDevice]]:
    started: list[SimDevice] = []
    yield started
    for device in started:
        device.stop()


def sim(fleet: FleetBroker, devices: list[SimDevice], name: str, **options: Any) -> SimDevice:
    device = SimDevice(fleet.settings(name), name, **options)
    devices.append(device.start())
    return device


def test_registry_when_devices_publish_presence_then_lists_online_state_profile_labels_and_versions(
    fleet: FleetBroker, operator: FleetOperator, devices: list[SimDevice]
) -> None:
    # given two devices online and one that went offline
    sim(fleet, devices, "cam-1", labels={"site": "lyon"}, active_version=3)
    sim(fleet, devices, "cam-2", profile="arm-cpu")
    gone = sim(fleet, devices, "cam-3")
    gone.stop()
    # when the operator's registry settles
    assert operator.wait_for(lambda r: r.presence is not None and not r.online, "cam-3", 5)
    records = {r.device: r for r in operator.settle()}
    # then it lists each with its facts
    assert records["cam-1"].online and records["cam-1"].labels == {"site": "lyon"}
    assert records["cam-1"].active_version == 3, "the version comes from the retained presence"
    assert records["cam-2"].profile == "arm-cpu"
    assert not records["cam-3"].online, "the offline presence marks the device offline"


def test_registry_when_operator_starts_later_then_retained_presence_is_seen(
    fleet: FleetBroker, devices: list[SimDevice]
) -> None:
    sim(fleet, devices, "cam-1")
    client = MqttClient(fleet.settings("operator"))
    client.connect()
    try:
        with FleetOperator(client) as late:
            assert late.wait_for(lambda r: r.online, "cam-1", 5), "retained presence arrives on subscribe"
    finally:
        client.disconnect()


def test_request_when_device_answers_then_response_matches_by_correlation_id(
    fleet: FleetBroker, operator: FleetOperator, devices: list[SimDevice]
) -> None:
    sim(fleet, devices, "cam-1")
    sim(fleet, devices, "cam-2")
    first = operator.request("cam-1", "ping", timeout=5)
    second = operator.request("cam-2", "report", timeout=5)
    assert first.ok and first.device == "cam-1" and first.result == {"pong": True}
    assert second.ok and second.device == "cam-2" and second.name == "report"


def test_request_when_device_never_answers_then_times_out(
    fleet: FleetBroker, operator: FleetOperator, devices: list[SimDevice]
) -> None:
    sim(fleet, devices, "cam-1", behaviour="silent")
    with pytest.raises(CommandTimeoutError, match="cam-1"):
        operator.request("cam-1", "ping", timeout=0.5)


def test_deploy_when_device_needs_chunks_then_operator_sends_them_and_device_activates(
    fleet: FleetBroker, operator: FleetOperator, devices: list[SimDevice], operator_keys: Keys, tmp_path: Path
) -> None:
    # given a device on version 1 and a signed version 2 with a 3,000-byte inline model in 1 KiB chunks
    device = sim(fleet, devices, "cam-1")
    envelope = signed_deployment(operator_keys.private, 2, tmp_path / "artifacts")
    # when the operator deploys it
    response = operator.deploy("cam-1", envelope, tmp_path / "artifacts", timeout=5)
    # then the device asked for the 3 chunks, got them, and activated
    assert response.ok and response.result == {"status": "active", "version": 2}
    assert device.chunks_received == 3, "every chunk is sent once"
    assert device.commands["deploy"] == 2, "deploy, need_chunks, chunks, deploy again"
    assert operator.wait_for(lambda r: r.active_version == 2, "cam-1", 5)


def test_deploy_when_device_fails_health_then_the_error_comes_back(
    fleet: FleetBroker, operator: FleetOperator, devices: list[SimDevice], operator_keys: Keys, tmp_path: Path
) -> None:
    sim(fleet, devices, "cam-1", behaviour="health_fail")
    envelope = signed_deployment(operator_keys.private, 2, tmp_path / "artifacts")
    response = operator.deploy("cam-1", envelope, tmp_path / "artifacts", timeout=5)
    assert not response.ok and response.error is not None and response.error.reason == "health_failed"


def test_publish_desired_when_device_connects_later_then_it_converges_from_the_retained_state(
    fleet: FleetBroker, operator: FleetOperator, devices: list[SimDevice], operator_keys: Keys, tmp_path: Path
) -> None:
    # given a desired state published while the device is away
    envelope = signed_deployment(operator_keys.private, 5, tmp_path / "artifacts")
    desired = operator.publish_desired("cam-2", envelope)
    # when the device connects
    sim(fleet, devices, "cam-2")
    # then it applies it and reports the revision
    assert operator.wait_for(
        lambda r: r.reported is not None and r.reported.applied_revision == desired.revision, "cam-2", 5
    )
    assert operator.wait_for(lambda r: r.active_version == 5, "cam-2", 5), "presence follows the new version"
    record = operator.device("cam-2")
    assert record.desired_payload is not None and decode_desired(record.desired_payload).revision == desired.revision
    assert operator.publish_desired("cam-2", None).revision > desired.revision, "revisions only go up"


def test_registry_when_a_state_message_is_malformed_then_it_is_ignored_and_counted(
    fleet: FleetBroker, operator: FleetOperator
) -> None:
    operator.client.publish(DeviceTopics("cam-1").state, b'{"device": "cam-1", "online": "yes"}', qos=1)
    operator.client.publish(DeviceTopics("cam-2").state, b"\xff\xfe not json", qos=1)
    operator.settle(quiet_s=0.3)
    assert operator.ignored_messages == 2
    assert not operator.device("cam-1").online
