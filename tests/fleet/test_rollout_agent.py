"""Staged rollouts to real device agents (edge_sdk.fleet.device.agent) on the shipped fleet broker, end to end.

Each agent verifies the signature, receives the inline chunks the operator sends on need_chunks,
builds the engine, runs the manifest's health check and activates; an agent that trusts another
key refuses; an agent that was offline converges from its retained desired state when it returns; a first wave
that fails is rolled back device by device to each one's own previous version, with rollback
manifests the operator signs on the spot.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from edge_sdk.fleet.device.agent import Agent
from edge_sdk.fleet.device.agent_config import AgentConfig
from edge_sdk.fleet.operator.client import FleetOperator, manifest_of
from edge_sdk.fleet.operator.rollout import RolloutRunner
from edge_sdk.fleet.operator.rollout_plan import create_rollout
from edge_sdk.fleet.operator.rollout_rollback import roll_back_rollout
from edge_sdk.fleet.operator.rollout_store import Outcome, RolloutRecord, RolloutState, RolloutStore
from edge_sdk.fleet.wire.signing import verify_manifest
from edge_sdk.fleet.wire.versions import VersionState
from edge_sdk.mqtt import MqttClient
from edge_sdk.profiles import default_profile_dir
from tests.fleet.conftest import Keys
from tests.support.waits import poll_until
from tools.harness.broker import BrokerFactory, FleetBroker, start_fleet_broker
from tools.harness.deployments import PROFILE, Deployment, make_deployment, make_rollback

pytestmark = [pytest.mark.broker, pytest.mark.timeout(180)]

NAMES = ["cam-a", "cam-b", "cam-c"]
DEVICES = [*NAMES, "cam-d", "cam-e"]
WAIT_S = 30.0
MakeAgent = Callable[..., Agent]


@pytest.fixture
def fleet(start_broker: BrokerFactory) -> FleetBroker:
    return start_fleet_broker(start_broker, devices=DEVICES, operators=["operator"])


@pytest.fixture
def agents(fleet: FleetBroker, tmp_path: Path, operator_keys: Keys) -> Iterator[MakeAgent]:
    running: list[Agent] = []

    def make(name: str, trusted: Path | None = None, profile_dir: Path | None = None) -> Agent:
        config = AgentConfig(
            profile_dir=profile_dir,
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
        poll_until(lambda: sum(1 for _, o in changes if o is Outcome.ACTIVE) >= 2, WAIT_S, interval=0.1)
        assert ("cam-c", Outcome.SENT) in changes and ("cam-c", Outcome.ACTIVE) not in changes
        # when cam-c comes back (a new agent process on the same store)
        agents("cam-c")
        thread.join(timeout=120)
        assert not thread.is_alive()
    # then it converged: its retained desired state named the deployment, the chunks came on request
    assert result[0].state is RolloutState.COMPLETED, result[0].reason
    assert set(outcomes(result[0]).values()) == {Outcome.ACTIVE}
    assert operator.wait_for(lambda r: r.active_version == 1, "cam-c", WAIT_S)


def profiles_with_a_missing_gpu(folder: Path) -> Path:
    """The shipped x86-cpu profile, and x86-nogpu: the same box told to build engines for an Ascend NPU
    (CANN), which it lacks (CUDA would not do: the GPU host has one)."""
    folder.mkdir(parents=True)
    text = (default_profile_dir() / f"{PROFILE}.yaml").read_text()
    (folder / f"{PROFILE}.yaml").write_text(text)
    broken = text.replace(f"name: {PROFILE}", "name: x86-nogpu").replace("- type: cpu", "- type: cann")
    assert "x86-nogpu" in broken and "cann" in broken
    (folder / "x86-nogpu.yaml").write_text(broken)
    return folder


def test_rollout_to_agents_when_the_first_wave_fails_then_its_devices_go_back_to_their_own_versions_unprepared(
    agents: MakeAgent, operator: FleetOperator, operator_keys: Keys, tmp_path: Path
) -> None:
    # given five agents that ran different versions before: cam-a 2, cam-b 1, cam-c 1, cam-d none, cam-e 1
    profiles = profiles_with_a_missing_gpu(tmp_path / "profiles")
    running = {name: agents(name, profile_dir=profiles) for name in DEVICES}
    wait_online(operator, DEVICES)
    releases = tmp_path / "releases"
    v1, v2, v3 = (
        make_deployment(releases, operator_keys.private, v, target={"device_ids": DEVICES}) for v in (1, 2, 3)
    )
    before = {"cam-a": 2, "cam-b": 1, "cam-c": 1, "cam-e": 1}
    for name, version in before.items():
        for release in (v1, v2)[:version]:
            response = operator.deploy(name, release.signed, artifacts_of(release), WAIT_S)
            assert response.ok, response
    # and cam-c, now on a profile whose engines need a GPU it lacks, fails the health check of any new version
    assert operator.request("cam-c", "set_profile", {"profile": "x86-nogpu"}, WAIT_S).ok
    assert operator.wait_for(lambda r: r.profile == "x86-nogpu", "cam-c", WAIT_S)
    operator.settle(quiet_s=0.3)
    # when version 3 rolls out with a first wave of four, the operator's key and no rollback manifest
    with RolloutStore(tmp_path / "rollouts.db") as store:
        rollout_id = create_rollout(
            operator, store, v3.signed, first_wave=4, rate_per_min=600, abort_threshold=0.2,
            artifacts_dir=artifacts_of(v3), command_timeout_s=WAIT_S,
            signing_key=operator_keys.folder / "fleet-signing.key",
        )  # fmt: skip
        record = RolloutRunner(operator, store, rollout_id).run()
    # then the rollout stopped at the first wave (cam-c: 1 of 4 > 20%) and every device is accounted for
    assert record.state is RolloutState.ABORTED and record.aborted_wave == 0, record.reason
    assert outcomes(record) == {
        "cam-a": Outcome.ROLLED_BACK, "cam-b": Outcome.ROLLED_BACK, "cam-c": Outcome.FAILED,
        "cam-d": Outcome.ACTIVE, "cam-e": Outcome.PENDING,
    }, [(d.device, d.outcome.value, d.reason) for d in record.devices]  # fmt: skip
    by_name = {d.device: d for d in record.devices}
    assert "health_failed" in (by_name["cam-c"].reason or "")
    assert "no version before" in (by_name["cam-d"].reason or ""), "nothing to go back to: it keeps version 3"
    # and each agent reports the version it ran before (cam-d keeps 3, cam-e was never sent it)
    expected = {"cam-a": 2, "cam-b": 1, "cam-c": 1, "cam-d": 3, "cam-e": 1}
    for name, version in expected.items():
        assert operator.wait_for(lambda r, v=version: r.active_version == v, name, WAIT_S), f"{name} on {version}"
        assert running[name].store.current_version() == version
    # and what went back did so with a rollback manifest signed for that device alone
    for name in ("cam-a", "cam-b"):
        envelope = by_name[name].rollback_manifest
        assert envelope is not None
        manifest = manifest_of(envelope)
        assert manifest.rollback and manifest.version == expected[name] and manifest.target.device_ids == [name]
        identity = running[name].identity()
        assert (
            verify_manifest(envelope, [operator_keys.public], identity, manifest.created_at, _state(name)) == manifest
        )


def _state(name: str) -> VersionState:
    """Versions as the device had them when the rollback was signed: version 3 active, its earlier ones kept."""
    kept = {"cam-a": {1, 2, 3}, "cam-b": {1, 3}}[name]
    return VersionState(current=3, highest=3, kept=frozenset(kept))
