"""Staged rollouts to real device agents (edge_sdk.fleet.agent) on the shipped fleet broker, end to end.

Each agent verifies the signature, receives the inline chunks the operator sends on need_chunks,
builds the engine, runs the manifest's health check and activates; an agent that trusts another
key refuses; an agent that was offline converges from its retained desired state when it returns.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from edge_sdk.fleet.agent import Agent
from edge_sdk.fleet.agent_config import AgentConfig
from edge_sdk.fleet.operator import FleetOperator
from edge_sdk.fleet.rollout import RolloutRunner, create_rollout, roll_back_rollout
from edge_sdk.fleet.rollout_store import Outcome, RolloutRecord, RolloutState, RolloutStore
from edge_sdk.mqtt import MqttClient
from tests.broker import BrokerFactory, FleetBroker, broker_factory_fixture, start_fleet_broker
from tests.fleet.agent_fixtures import PROFILE, Deployment, make_deployment, make_rollback
from tests.fleet.conftest import Keys

pytestmark = [pytest.mark.broker, pytest.mark.timeout(180)]

NAMES = ["cam-a", "cam-b", "cam-c"]
WAIT_S = 30.0
MakeAgent = Callable[..., Agent]


@pytest.fixture
def start_broker(tmp_path: Path) -> Iterator[BrokerFactory]:
    yield from broker_factory_fixture(tmp_path / "brokers")


@pytest.fixture
def fleet(start_broker: BrokerFactory) -> FleetBroker:
    return start_fleet_broker(start_broker, devices=NAMES, operators=["operator"])


@pytest.fixture
def agents(fleet: FleetBroker, tmp_path: Path, operator_keys: Keys) -> Iterator[MakeAgent]:
    running: list[Agent] = []

    def make(name: str, trusted: Path | None = None) -> Agent:
        config = AgentConfig(
            device_id=name,
            broker=fleet.settings(name, client_id=name, clean_start=False),
            store_dir=tmp_path / name / "store",
            trusted_keys_dir=trusted or operator_keys.folder,
            profile=PROFILE,
            engine_cache_dir=tmp_path / name / "engines",
        )
        agent = Agent(config)
        agent.start()
        running.append(agent)
        return agent

    yield make
    for agent in running:
        if agent.client.state.value != "closed":
            agent.stop()


@pytest.fixture
def operator(fleet: FleetBroker) -> Iterator[FleetOperator]:
    with MqttClient(fleet.settings("operator", client_id="operator-console")) as client, FleetOperator(client) as op:
        yield op


def deployment(tmp_path: Path, keys: Keys, version: int) -> Deployment:
    return make_deployment(tmp_path / "releases", keys.private, version, target={"profiles": [PROFILE]})


def artifacts_of(release: Deployment) -> Path:
    return next(iter(release.files.values())).parent


def wait_online(operator: FleetOperator, names: list[str]) -> None:
    for name in names:
        assert operator.wait_for(lambda r: r.online and r.profile == PROFILE, name, WAIT_S), f"{name} online"
    operator.settle(quiet_s=0.3)


def outcomes(record: RolloutRecord) -> dict[str, Outcome]:
    return {d.device: d.outcome for d in record.devices}


def test_rollout_to_agents_when_all_healthy_then_all_active_and_a_rollback_takes_them_all_back(
    agents: MakeAgent, operator: FleetOperator, operator_keys: Keys, tmp_path: Path
) -> None:
    # given three agents running version 1 (itself rolled out)
    for name in NAMES:
        agents(name)
    wait_online(operator, NAMES)
    v1, v2 = deployment(tmp_path, operator_keys, 1), deployment(tmp_path, operator_keys, 2)
    with RolloutStore(tmp_path / "rollouts.db") as store:
        first = create_rollout(
            operator, store, v1.signed, first_wave=1, rate_per_min=600, artifacts_dir=artifacts_of(v1)
        )
        assert set(outcomes(RolloutRunner(operator, store, first).run()).values()) == {Outcome.ACTIVE}
        # when version 2 rolls out with a signed rollback to version 1
        rollback = make_rollback(operator_keys.private, v1)
        second = create_rollout(
            operator, store, v2.signed, first_wave=1, rate_per_min=600, abort_threshold=0.2,
            rollback_manifest=rollback, artifacts_dir=artifacts_of(v2), command_timeout_s=WAIT_S,
        )  # fmt: skip
        record = RolloutRunner(operator, store, second).run()
        # then every agent built, checked and activated it
        assert record.state is RolloutState.COMPLETED, record.reason
        assert set(outcomes(record).values()) == {Outcome.ACTIVE}
        for name in NAMES:
            assert operator.wait_for(lambda r: r.active_version == 2, name, WAIT_S), f"{name} reports version 2"
        # and rolling the rollout back puts every agent on version 1 again
        undone = roll_back_rollout(operator, store, second)
    assert undone.state is RolloutState.ROLLED_BACK
    assert set(outcomes(undone).values()) == {Outcome.ROLLED_BACK}
    for name in NAMES:
        assert operator.wait_for(lambda r: r.active_version == 1, name, WAIT_S), f"{name} back on version 1"


def test_rollout_to_agents_when_the_first_wave_refuses_then_aborted_and_nobody_else_is_sent_it(
    agents: MakeAgent, operator: FleetOperator, operator_keys: Keys, stranger_keys: Keys, tmp_path: Path
) -> None:
    # given cam-a (first in order) trusts another key, so it refuses the operator's signature
    agents("cam-a", trusted=stranger_keys.folder)
    agents("cam-b")
    agents("cam-c")
    wait_online(operator, NAMES)
    v1 = deployment(tmp_path, operator_keys, 1)
    with RolloutStore(tmp_path / "rollouts.db") as store:
        rollout_id = create_rollout(
            operator, store, v1.signed, first_wave=1, rate_per_min=600, abort_threshold=0.2,
            artifacts_dir=artifacts_of(v1), command_timeout_s=WAIT_S,
        )  # fmt: skip
        record = RolloutRunner(operator, store, rollout_id).run()
    assert record.state is RolloutState.ABORTED
    assert outcomes(record) == {"cam-a": Outcome.REFUSED, "cam-b": Outcome.PENDING, "cam-c": Outcome.PENDING}
    assert "untrusted-key" in (record.devices[0].reason or ""), record.devices[0].reason
    for name in ("cam-b", "cam-c"):
        assert operator.device(name).active_version is None, f"{name} was never sent the deployment"


def test_rollout_to_agents_when_one_is_offline_then_it_gets_the_deployment_when_it_returns(
    agents: MakeAgent, operator: FleetOperator, operator_keys: Keys, tmp_path: Path
) -> None:
    # given two agents online and one that went offline after the operator saw it
    agents("cam-a")
    agents("cam-b")
    away = agents("cam-c")
    wait_online(operator, NAMES)
    away.stop()
    assert operator.wait_for(lambda r: not r.online, "cam-c", WAIT_S)
    v1 = deployment(tmp_path, operator_keys, 1)
    changes: list[tuple[str, Outcome]] = []
    with RolloutStore(tmp_path / "rollouts.db") as store:
        rollout_id = create_rollout(
            operator, store, v1.signed, first_wave=3, rate_per_min=600, artifacts_dir=artifacts_of(v1),
            command_timeout_s=WAIT_S,
        )  # fmt: skip
        runner = RolloutRunner(
            operator, store, rollout_id, offline_wait_s=120, on_change=lambda d, o, r: changes.append((d, o))
        )
        result: list[RolloutRecord] = []
        thread = threading.Thread(target=lambda: result.append(runner.run()))
        thread.start()
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and sum(1 for _, o in changes if o is Outcome.ACTIVE) < 2:
            time.sleep(0.1)
        assert ("cam-c", Outcome.SENT) in changes and ("cam-c", Outcome.ACTIVE) not in changes
        # when cam-c comes back (a new agent process on the same store)
        agents("cam-c")
        thread.join(timeout=120)
        assert not thread.is_alive()
    # then it converged: its retained desired state named the deployment, the chunks came on request
    assert result[0].state is RolloutState.COMPLETED, result[0].reason
    assert set(outcomes(result[0]).values()) == {Outcome.ACTIVE}
    assert operator.wait_for(lambda r: r.active_version == 1, "cam-c", WAIT_S)
