"""Staged rollouts against simulated devices on the shipped fleet broker (TLS client certificates, ACL).

The devices are real protocol peers (tools/harness/fleet_sim.py): one answers ok, one fails its
health check, one refuses, one never answers, one is offline and converges from its retained
desired state when it returns.
"""

from __future__ import annotations

import functools
import itertools
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from edge_sdk.fleet.operator.client import DeviceRecord, FleetOperator, manifest_of
from edge_sdk.fleet.operator.rollout import RolloutRunner
from edge_sdk.fleet.operator.rollout_plan import create_rollout
from edge_sdk.fleet.operator.rollout_rollback import roll_back_rollout
from edge_sdk.fleet.operator.rollout_store import Outcome, RolloutRecord, RolloutState, RolloutStore
from edge_sdk.fleet.wire.protocol import decode_desired
from edge_sdk.mqtt import MqttClient
from tests.support.waits import poll_until
from tools.harness.broker import BrokerFactory, FleetBroker, start_fleet_broker
from tools.harness.fleet_sim import SimDevice, signed_deployment, version_of

from .conftest import Keys

pytestmark = pytest.mark.broker

NAMES = [f"cam-{i}" for i in range(1, 7)]


@dataclass
class Timeline:
    """Every outcome change the runner made, with its time."""

    events: list[tuple[float, str, Outcome]] = field(default_factory=list)

    def __call__(self, device: str, outcome: Outcome, reason: str | None) -> None:
        self.events.append((time.monotonic(), device, outcome))

    def first(self, device: str, outcome: Outcome) -> float:
        return next(t for t, d, o in self.events if d == device and o is outcome)


class Harness:
    def __init__(self, fleet: FleetBroker, keys: Keys, folder: Path):
        self.fleet = fleet
        self.keys = keys
        self.folder = folder
        self.devices: dict[str, SimDevice] = {}
        self.artifacts = folder / "artifacts"
        self.envelope = signed_deployment(keys.private, 2, self.artifacts)
        self.rollback = signed_deployment(keys.private, 1, folder / "rollback-artifacts", rollback=True)
        self.state_file = folder / "rollouts.db"
        self.clients: list[MqttClient] = []

    def device(self, name: str, behaviour: str = "ok") -> SimDevice:
        device = SimDevice(self.fleet.settings(name), name, behaviour=behaviour)
        self.devices[name] = device
        return device.start()

    def take_offline(self, operator: FleetOperator, name: str) -> SimDevice:
        """The device goes away after the operator has seen it (its facts stay known, marked offline)."""
        device = self.devices[name]
        device.stop()
        assert operator.wait_for(lambda r: r.presence is not None and not r.online, name, 5)
        return device

    def operator(self) -> FleetOperator:
        client = MqttClient(self.fleet.settings("operator"))
        client.connect()
        self.clients.append(client)
        operator = FleetOperator(client).start()
        operator.settle(quiet_s=0.3)
        return operator

    def close(self) -> None:
        for device in self.devices.values():
            device.stop()
        for client in self.clients:
            client.disconnect()


@pytest.fixture
def harness(start_broker: BrokerFactory, operator_keys: Keys, tmp_path: Path) -> Iterator[Harness]:
    fleet = start_fleet_broker(start_broker, devices=NAMES, operators=["operator"])
    harness = Harness(fleet, operator_keys, tmp_path)
    yield harness
    harness.close()


def rollout(harness: Harness, operator: FleetOperator, store: RolloutStore, **options: Any) -> str:
    values: dict[str, Any] = {
        "first_wave": 2,
        "rate_per_min": 600,
        "abort_threshold": 0.2,
        "command_timeout_s": 5,
        "rollback_manifest": harness.rollback,
        "artifacts_dir": harness.artifacts,
    }
    values.update(options)
    return create_rollout(operator, store, harness.envelope, **values)


def applied_revision(record: DeviceRecord, revision: int) -> bool:
    return record.reported is not None and record.reported.applied_revision == revision


def outcomes(record: RolloutRecord) -> dict[str, Outcome]:
    return {d.device: d.outcome for d in record.devices}


def test_rollout_when_every_device_succeeds_then_first_wave_finishes_before_the_rate_sends_the_rest(
    harness: Harness,
) -> None:
    # given five healthy devices on version 1
    for name in NAMES[:5]:
        harness.device(name)
    operator = harness.operator()
    timeline = Timeline()
    with RolloutStore(harness.state_file) as store:
        # when version 2 rolls out with a first wave of 2, then 120 devices a minute (one every 0.5 s)
        rollout_id = rollout(harness, operator, store, first_wave=2, rate_per_min=120)
        record = RolloutRunner(operator, store, rollout_id, on_change=timeline).run()
    # then every device is active, each through one deployment with its chunks
    assert record.state is RolloutState.COMPLETED
    assert set(outcomes(record).values()) == {Outcome.ACTIVE}
    assert [d.wave for d in record.devices] == [0, 0, 1, 1, 1]
    for name in NAMES[:5]:
        device = harness.devices[name]
        assert device.active_version == 2 and device.activations[2] == 1
        assert device.chunks_received == 3, f"{name} got each of the 3 chunks once"
        desired = operator.device(name).desired
        assert desired is not None and desired.deployment is not None and version_of(desired.deployment) == 2
    # and the first wave was done before the rest was sent, which went out no faster than the rate
    wave0_done = max(timeline.first(n, Outcome.ACTIVE) for n in NAMES[:2])
    later_sends = [timeline.first(n, Outcome.SENT) for n in NAMES[2:5]]
    assert min(later_sends) >= wave0_done, "nothing beyond the first wave is sent before it is done"
    gaps = [b - a for a, b in itertools.pairwise(later_sends)]
    assert min(gaps) >= 0.45, f"expected one device every 0.5 s, got gaps {gaps}"


def test_rollout_when_first_wave_fails_beyond_threshold_then_it_aborts_and_rolls_the_wave_back(
    harness: Harness,
) -> None:
    # given a first wave of two where one device fails its health check (50% > 20%)
    harness.device("cam-1")
    harness.device("cam-2", behaviour="health_fail")
    for name in NAMES[2:5]:
        harness.device(name)
    operator = harness.operator()
    with RolloutStore(harness.state_file) as store:
        rollout_id = rollout(harness, operator, store, first_wave=2)
        # when the rollout runs
        record = RolloutRunner(operator, store, rollout_id).run()
    # then it stops, the succeeded device of the wave is rolled back, the rest was never sent
    assert record.state is RolloutState.ABORTED and "wave 0" in (record.reason or "")
    assert outcomes(record) == {
        "cam-1": Outcome.ROLLED_BACK,
        "cam-2": Outcome.FAILED,
        "cam-3": Outcome.PENDING,
        "cam-4": Outcome.PENDING,
        "cam-5": Outcome.PENDING,
    }
    assert harness.devices["cam-1"].active_version == 1, "the signed rollback manifest took cam-1 back"
    assert harness.devices["cam-1"].commands["rollback"] == 1
    for name in NAMES[2:5]:
        assert harness.devices[name].commands["deploy"] == 0, f"{name} was never sent the deployment"
    desired = operator.device("cam-1").desired
    assert desired is not None and desired.deployment is not None and version_of(desired.deployment) == 1


def test_rollout_when_a_later_wave_fails_then_only_that_wave_is_rolled_back(harness: Harness) -> None:
    # given a healthy first wave, then a wave where a device refuses (1 of 4 = 25% > 20%)
    harness.device("cam-1")
    harness.device("cam-2")
    harness.device("cam-3", behaviour="refuse")
    harness.device("cam-4")
    harness.device("cam-5")
    operator = harness.operator()
    with RolloutStore(harness.state_file) as store:
        rollout_id = rollout(harness, operator, store, first_wave=1, rate_per_min=120)
        record = RolloutRunner(operator, store, rollout_id).run()
    # then the first wave stays on version 2, wave 1's active device goes back, the rest is untouched
    assert record.state is RolloutState.ABORTED and "wave 1" in (record.reason or "")
    result = outcomes(record)
    assert result["cam-1"] is Outcome.ACTIVE, "an earlier, healthy wave is not rolled back"
    assert result["cam-2"] is Outcome.ROLLED_BACK
    assert result["cam-3"] is Outcome.REFUSED
    assert result["cam-4"] is Outcome.PENDING and result["cam-5"] is Outcome.PENDING
    assert harness.devices["cam-1"].active_version == 2 and harness.devices["cam-2"].active_version == 1


def test_rollout_when_a_device_is_offline_then_it_converges_from_retained_desired_state_on_return(
    harness: Harness,
) -> None:
    # given two devices online and one offline
    harness.device("cam-1")
    harness.device("cam-2")
    harness.device("cam-3")
    operator = harness.operator()
    away = harness.take_offline(operator, "cam-3")
    timeline = Timeline()
    with RolloutStore(harness.state_file) as store:
        rollout_id = rollout(harness, operator, store, first_wave=3)
        runner = RolloutRunner(
            operator, store, rollout_id, offline_wait_s=30, resend_on_return=False, on_change=timeline
        )
        result: list[RolloutRecord] = []
        thread = threading.Thread(target=lambda: result.append(runner.run()))
        thread.start()
        # when the rollout has sent what it can, the offline device is only given its desired state
        poll_until(lambda: len({d for _, d, o in timeline.events if o.done}) >= 2, 10, interval=0.05)
        assert outcomes(store.load(rollout_id))["cam-3"] is Outcome.SENT
        assert store.load(rollout_id).devices[2].via == "desired"
        # and then the device comes back
        away.start()
        thread.join(timeout=20)
        assert not thread.is_alive()
    # then it applied the retained desired state by itself, and the rollout saw it through its reported state
    assert result[0].state is RolloutState.COMPLETED
    assert outcomes(result[0]) == {"cam-1": Outcome.ACTIVE, "cam-2": Outcome.ACTIVE, "cam-3": Outcome.ACTIVE}
    assert away.active_version == 2 and away.commands["deploy"] == 0, "no command: the desired state did it"


def test_rollout_when_operator_restarts_mid_rollout_then_it_resumes_without_resending_to_done_devices(
    harness: Harness,
) -> None:
    # given five devices and a slow rate (one a second)
    for name in NAMES[:5]:
        harness.device(name)
    first = harness.operator()
    stop = threading.Event()

    def stop_after_three(device: str, outcome: Outcome, reason: str | None) -> None:
        if outcome is Outcome.ACTIVE and sum(d.activations[2] for d in harness.devices.values()) >= 3:
            stop.set()

    with RolloutStore(harness.state_file) as store:
        rollout_id = rollout(harness, first, store, first_wave=1, rate_per_min=60)
        # when the operator stops after three devices (its process ends)
        partial = RolloutRunner(first, store, rollout_id, on_change=stop_after_three).run(stop)
    first.close()
    harness.clients[0].disconnect()
    assert partial.state is RolloutState.RUNNING
    done_before = {d.device for d in partial.devices if d.outcome.done}
    assert len(done_before) >= 3
    assert any(d.outcome is Outcome.PENDING for d in partial.devices), "stopped before the end"
    # and a new operator process opens the same state file
    second = harness.operator()
    with RolloutStore(harness.state_file) as store:
        record = RolloutRunner(second, store, rollout_id).run()
    # then the rollout completes and no device got the deployment twice
    assert record.state is RolloutState.COMPLETED
    assert set(outcomes(record).values()) == {Outcome.ACTIVE}
    for name in NAMES[:5]:
        device = harness.devices[name]
        assert device.activations[2] == 1
        assert device.commands["deploy"] == 2, f"{name}: one deploy, one need_chunks round, never resent"


def test_rollout_when_devices_behave_differently_then_every_device_has_an_outcome(harness: Harness) -> None:
    # given one device of each kind and no abort (threshold 100%)
    harness.device("cam-1")
    harness.device("cam-2", behaviour="refuse")
    harness.device("cam-3", behaviour="health_fail")
    harness.device("cam-4", behaviour="silent")
    harness.device("cam-5")
    operator = harness.operator()
    harness.take_offline(operator, "cam-5")
    with RolloutStore(harness.state_file) as store:
        rollout_id = rollout(harness, operator, store, first_wave=5, abort_threshold=1.0, command_timeout_s=1)
        record = RolloutRunner(operator, store, rollout_id).run()
    # then each is accounted for, and the offline one waits for its desired state
    assert outcomes(record) == {
        "cam-1": Outcome.ACTIVE,
        "cam-2": Outcome.REFUSED,
        "cam-3": Outcome.FAILED,
        "cam-4": Outcome.TIMED_OUT,
        "cam-5": Outcome.SENT,
    }
    assert record.state is RolloutState.WAITING
    assert sum(record.counts().values()) == 5
    assert "health_failed" in (record.devices[2].reason or "")
    desired = operator.device("cam-5").desired
    assert desired is not None and desired.deployment is not None, "the offline device's desired state waits"


def test_roll_back_rollout_when_asked_then_active_devices_go_back_and_offline_ones_get_their_old_desired_state(
    harness: Harness,
) -> None:
    harness.device("cam-1")
    harness.device("cam-2")
    harness.device("cam-3")
    operator = harness.operator()
    harness.take_offline(operator, "cam-3")
    with RolloutStore(harness.state_file) as store:
        rollout_id = rollout(harness, operator, store, first_wave=3)
        RolloutRunner(operator, store, rollout_id).run()
        record = roll_back_rollout(operator, store, rollout_id)
    assert record.state is RolloutState.ROLLED_BACK
    assert outcomes(record) == {"cam-1": Outcome.ROLLED_BACK, "cam-2": Outcome.ROLLED_BACK, "cam-3": Outcome.PENDING}
    assert harness.devices["cam-1"].active_version == 1
    payload = operator.device("cam-3").desired_payload
    assert payload is not None and decode_desired(payload).deployment is None, "cam-3 no longer wants version 2"


def test_rollout_when_operator_stops_right_after_an_abort_then_resuming_rolls_the_wave_back_once(
    harness: Harness,
) -> None:
    # given a first wave of three where one fails its health check (33% > 20%)
    harness.device("cam-1")
    harness.device("cam-2")
    harness.device("cam-3", behaviour="health_fail")
    operator = harness.operator()
    stop = threading.Event()

    def stop_at_the_failure(device: str, outcome: Outcome, reason: str | None) -> None:
        if outcome is Outcome.FAILED:
            stop.set()

    with RolloutStore(harness.state_file) as store:
        rollout_id = rollout(harness, operator, store, first_wave=3)
        # when the operator stops as the rollout aborts, before it has rolled anything back
        partial = RolloutRunner(operator, store, rollout_id, on_change=stop_at_the_failure).run(stop)
        assert partial.state is RolloutState.ABORTED and partial.aborted_wave == 0
        assert all(d.commands["rollback"] == 0 for d in harness.devices.values())
        # and the aborted rollout is run again (the operator's certificate allows one connection: reuse it)
        record = RolloutRunner(operator, store, rollout_id).run()
        # then the wave's active devices are rolled back, each exactly once, and running it again changes nothing
        again = RolloutRunner(operator, store, rollout_id).run()
    assert outcomes(record) == {"cam-1": Outcome.ROLLED_BACK, "cam-2": Outcome.ROLLED_BACK, "cam-3": Outcome.FAILED}
    assert outcomes(again) == outcomes(record)
    for name in ("cam-1", "cam-2"):
        assert harness.devices[name].commands["rollback"] == 1 and harness.devices[name].active_version == 1


def test_rollout_when_no_rollback_manifest_then_the_wave_goes_back_through_its_previous_desired_state(
    harness: Harness,
) -> None:
    # given devices whose desired state names version 1 (signed earlier) and a first wave that fails
    harness.device("cam-1")
    harness.device("cam-2", behaviour="health_fail")
    operator = harness.operator()
    v1 = signed_deployment(harness.keys.private, 1, harness.folder / "v1")
    for name in ("cam-1", "cam-2"):
        applied = functools.partial(applied_revision, revision=operator.publish_desired(name, v1).revision)
        assert operator.wait_for(applied, name, 5), f"{name} applied its desired state"
    with RolloutStore(harness.state_file) as store:
        rollout_id = rollout(harness, operator, store, first_wave=2, rollback_manifest=None)
        record = RolloutRunner(operator, store, rollout_id).run()
    # then cam-1 converged back to version 1 from the restored desired state
    assert record.state is RolloutState.ABORTED
    assert outcomes(record) == {"cam-1": Outcome.ROLLED_BACK, "cam-2": Outcome.FAILED}
    assert "desired state" in (record.devices[0].reason or "")
    assert harness.devices["cam-1"].active_version == 1 and harness.devices["cam-1"].commands["rollback"] == 0


def start_devices(harness: Harness, versions: dict[str, int | None], failing: str | None = None) -> None:
    """Devices that run (and keep) their own version, or none; `failing` fails its health check."""
    for name, version in versions.items():
        behaviour = "health_fail" if name == failing else "ok"
        device = SimDevice(harness.fleet.settings(name), name, behaviour=behaviour, active_version=version)
        harness.devices[name] = device.start()


def test_rollout_when_the_operator_signs_rollbacks_then_each_device_of_the_failing_wave_goes_back_to_its_own_version(
    harness: Harness,
) -> None:
    # given a first wave of four that ran different versions (cam-4 none) and where cam-3 fails (25% > 20%)
    start_devices(harness, {"cam-1": 1, "cam-2": 3, "cam-3": 1, "cam-4": None, "cam-5": 1}, failing="cam-3")
    operator = harness.operator()
    v5 = signed_deployment(harness.keys.private, 5, harness.folder / "v5")
    with RolloutStore(harness.state_file) as store:
        # when version 5 rolls out with the operator's key and no rollback manifest
        rollout_id = create_rollout(
            operator, store, v5, first_wave=4, rate_per_min=600, abort_threshold=0.2, command_timeout_s=5,
            artifacts_dir=harness.folder / "v5", signing_key=harness.keys.folder / "fleet-signing.key",
        )  # fmt: skip
        record = RolloutRunner(operator, store, rollout_id).run()
    # then every device of the wave is accounted for: back to its own version, failed, or active with the reason
    assert record.state is RolloutState.ABORTED, record.reason
    assert outcomes(record) == {
        "cam-1": Outcome.ROLLED_BACK, "cam-2": Outcome.ROLLED_BACK, "cam-3": Outcome.FAILED,
        "cam-4": Outcome.ACTIVE, "cam-5": Outcome.PENDING,
    }  # fmt: skip
    running = {name: device.active_version for name, device in harness.devices.items()}
    assert running == {"cam-1": 1, "cam-2": 3, "cam-3": 1, "cam-4": 5, "cam-5": 1}
    by_name = {d.device: d for d in record.devices}
    assert "no version before" in (by_name["cam-4"].reason or "")
    for name, version in (("cam-1", 1), ("cam-2", 3)):
        envelope = by_name[name].rollback_manifest
        assert envelope is not None, f"{name}'s rollback manifest is kept in the store"
        manifest = manifest_of(envelope)
        assert manifest.rollback and manifest.version == version and manifest.target.device_ids == [name]
        assert harness.devices[name].commands["rollback"] == 1
        desired = operator.device(name).desired
        assert desired is not None and desired.deployment == envelope.decode(), "the rollback is the desired state"


def test_roll_back_rollout_when_the_operator_restarted_then_the_key_file_kept_with_the_rollout_signs_them(
    harness: Harness,
) -> None:
    # given version 5 rolled out (with the key file) to devices that ran versions 1 and 3
    start_devices(harness, {"cam-1": 1, "cam-2": 3})
    v5 = signed_deployment(harness.keys.private, 5, harness.folder / "v5")
    operator = harness.operator()
    with RolloutStore(harness.state_file) as store:
        rollout_id = create_rollout(
            operator, store, v5, first_wave=2, rate_per_min=600, command_timeout_s=5,
            artifacts_dir=harness.folder / "v5", signing_key=harness.keys.folder / "fleet-signing.key",
        )  # fmt: skip
        assert RolloutRunner(operator, store, rollout_id).run().state is RolloutState.COMPLETED
    harness.clients.pop().disconnect()
    # when a new operator process rolls it back, without being given the key
    with RolloutStore(harness.state_file) as store:
        record = roll_back_rollout(harness.operator(), store, rollout_id)
    # then each device is back on the version it ran before
    assert record.state is RolloutState.ROLLED_BACK
    assert outcomes(record) == {"cam-1": Outcome.ROLLED_BACK, "cam-2": Outcome.ROLLED_BACK}
    assert {n: d.active_version for n, d in harness.devices.items()} == {"cam-1": 1, "cam-2": 3}
