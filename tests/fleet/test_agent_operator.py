"""The device agent and the operator client (edge_sdk.fleet.operator.client) end to end on the shipped fleet broker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from edge_sdk.fleet.device.agent import Agent
from edge_sdk.fleet.operator.client import FleetOperator
from edge_sdk.mqtt import MqttClient
from tests.fleet.conftest import Keys
from tools.harness.broker import FleetBroker
from tools.harness.deployments import DEVICE_ID, PROFILE, make_deployment, make_rollback

pytestmark = [pytest.mark.broker, pytest.mark.timeout(90)]

WAIT_S = 20.0


@pytest.fixture
def operator(fleet: FleetBroker) -> Iterator[FleetOperator]:
    with MqttClient(fleet.settings("operator", client_id="operator-console")) as client, FleetOperator(client) as op:
        yield op


def test_agent_with_operator_when_deploy_rollback_and_desired_pipelines_then_device_follows(
    agent: Agent, operator: FleetOperator, tmp_path: Path, operator_keys: Keys
) -> None:
    # given a device the operator sees online
    assert operator.wait_for(lambda r: r.online and r.profile == PROFILE, DEVICE_ID, WAIT_S), "device online"

    # when the operator deploys two versions (answering need_chunks from the artifact folders)
    first = make_deployment(tmp_path / "a", operator_keys.private, 1)
    second = make_deployment(tmp_path / "b", operator_keys.private, 2)
    for deployment in (first, second):
        folder = next(iter(deployment.files.values())).parent
        response = operator.deploy(DEVICE_ID, deployment.signed, artifacts_dir=folder, timeout=WAIT_S)
        assert response.ok and response.result is not None and response.result["status"] == "active", response

    # then the registry shows version 2; an explicit signed rollback brings back version 1
    assert operator.wait_for(lambda r: r.active_version == 2, DEVICE_ID, WAIT_S)
    rolled = operator.request(DEVICE_ID, "rollback", {"manifest": make_rollback(operator_keys.private, first).decode()})
    assert rolled.ok and rolled.result is not None and rolled.result["active_version"] == 1, rolled
    assert operator.wait_for(lambda r: r.active_version == 1, DEVICE_ID, WAIT_S)

    # and a desired state without a deployment sets the pipelines and is reported as applied
    desired = operator.publish_desired(DEVICE_ID, None, ["people"])
    assert operator.wait_for(
        lambda r: r.reported is not None and r.reported.applied_revision == desired.revision, DEVICE_ID, WAIT_S
    ), "the device applies the desired revision"
    assert agent.state.pipelines == ["people"]
    assert operator.wait_for(lambda r: r.presence is not None and r.presence.health == "degraded", DEVICE_ID, WAIT_S), (
        "a wanted pipeline that cannot run (no such artifact) shows as degraded"
    )
    assert agent.store.current_version() == 1
