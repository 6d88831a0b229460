"""Per-device rollback manifests: signed by the operator for one device and its own previous version.

No broker here: the manifest is checked with the device's own verification (verify_manifest), and
roll_back_device talks to a stand-in operator that records what it is asked to send.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from edge_sdk.core.errors import ManifestReplayError, ManifestTargetError
from edge_sdk.fleet.operator.client import DeviceRecord, manifest_of
from edge_sdk.fleet.operator.rollout_rollback import (
    NO_PREVIOUS_VERSION,
    device_rollback_manifest,
    resolve_signing_key,
    roll_back_device,
)
from edge_sdk.fleet.operator.rollout_store import DeviceProgress, Outcome, RolloutSpec, RolloutStore, TargetDevice
from edge_sdk.fleet.wire.manifest import DeviceIdentity
from edge_sdk.fleet.wire.protocol import ErrorInfo, Presence, Response
from edge_sdk.fleet.wire.signing import key_id, sign_manifest, verify_manifest
from edge_sdk.fleet.wire.versions import VersionState

from .conftest import DEVICE, NOW, Keys, make_manifest


def state_after(version: int, created: Any, kept: set[int]) -> VersionState:
    """A device that activated `version` (created at `created`) and keeps `kept`."""
    return VersionState(current=version, highest=version, kept=frozenset(kept), newest_created_at=created)


def test_device_rollback_manifest_when_verified_by_the_device_then_a_rollback_to_its_version_for_it_alone(
    operator_keys: Keys,
) -> None:
    deployment = make_manifest(3)
    envelope = device_rollback_manifest(deployment, DEVICE.device_id, 2, operator_keys.private, now=NOW)
    # the device that ran version 2 before version 3 accepts it: signed by a trusted key, a rollback, to 2
    manifest = verify_manifest(
        envelope, [operator_keys.public], DEVICE, NOW, state_after(3, deployment.created_at, {1, 2, 3})
    )
    assert manifest.rollback and manifest.version == 2
    assert manifest.target.device_ids == [DEVICE.device_id] and not manifest.target.profiles
    assert manifest.created_at == NOW and manifest.expires_at - NOW <= timedelta(minutes=15)
    # and no other device with the same profile and labels does
    twin = DeviceIdentity(device_id="box-18", profile=DEVICE.profile, labels=DEVICE.labels)
    with pytest.raises(ManifestTargetError, match="box-17"):
        verify_manifest(envelope, [operator_keys.public], twin, NOW, state_after(3, deployment.created_at, {2, 3}))


def test_device_rollback_manifest_when_the_operator_clock_is_behind_then_still_newer_than_the_deployment(
    operator_keys: Keys,
) -> None:
    deployment = make_manifest(3, created_at=(NOW + timedelta(minutes=5)).isoformat())
    envelope = device_rollback_manifest(deployment, DEVICE.device_id, 1, operator_keys.private, now=NOW)
    manifest = manifest_of(envelope)
    assert manifest.created_at > deployment.created_at
    later = NOW + timedelta(minutes=6)
    verify_manifest(envelope, [operator_keys.public], DEVICE, later, state_after(3, deployment.created_at, {1, 3}))
    # replaying it once the device activated something newer is refused
    with pytest.raises(ManifestReplayError):
        verify_manifest(
            envelope, [operator_keys.public], DEVICE, later, state_after(3, later - timedelta(seconds=1), {1, 3})
        )


def test_device_rollback_manifest_when_the_previous_deployment_is_known_then_it_lists_its_artifacts(
    operator_keys: Keys,
) -> None:
    previous, deployment = make_manifest(2), make_manifest(3)
    envelope = device_rollback_manifest(
        deployment, DEVICE.device_id, 2, operator_keys.private, previous=previous, now=NOW
    )
    assert manifest_of(envelope).artifacts == previous.artifacts
    with pytest.raises(ValueError, match="previous version"):
        device_rollback_manifest(deployment, DEVICE.device_id, 3, operator_keys.private)


# ---------------------------------------------------------------- roll_back_device with a stand-in operator


class StandInOperator:
    """Answers `rollback` like a device that keeps `kept`; records what was sent."""

    def __init__(self, active: int, kept: set[int]):
        self.active = active
        self.kept = kept
        self.sent: list[bytes] = []
        self.desired: list[bytes | None] = []

    def request(self, device: str, name: str, args: dict[str, Any] | None = None, timeout: float = 5.0) -> Response:
        assert args is not None, "a rollback carries its manifest"
        envelope = args["manifest"].encode()
        self.sent.append(envelope)
        manifest = manifest_of(envelope)
        if manifest.version == self.active:
            error = ErrorInfo(reason="refused", message="already active", detail="replay")
            return Response(id="x", device=device, name=name, ok=False, error=error)
        assert manifest.rollback and manifest.version in self.kept and manifest.target.device_ids == [device]
        self.active = manifest.version
        return Response(id="x", device=device, name=name, ok=True, result={"status": "active"})

    def publish_desired(self, device: str, deployment: bytes | None, pipelines: Iterable[str] | None = None) -> None:
        self.desired.append(deployment)

    def wait_for(self, predicate: Callable[[DeviceRecord], bool], device: str, timeout: float) -> bool:
        presence = Presence(device=device, online=True, profile="x86-cpu", active_version=self.active)
        return predicate(DeviceRecord(device, presence=presence))


def spec_of(operator_keys: Keys, version: int = 3) -> RolloutSpec:
    deployment = make_manifest(version)
    return RolloutSpec(
        manifest=sign_manifest(deployment, operator_keys.private).to_bytes(),
        deployment_id=deployment.deployment_id,
        version=version,
        selector=make_manifest(1).target,
        first_wave=1,
        rate_per_min=60,
        abort_threshold=0.2,
    )


def progress(device: str, previous: int | None, rollback_manifest: bytes | None = None) -> DeviceProgress:
    return DeviceProgress(
        device, 0, 0, Outcome.ACTIVE, "command", None, previous, None, None, None, 1, rollback_manifest
    )


def test_roll_back_device_when_keyed_then_signs_for_that_device_keeps_it_first_and_resends_the_same_one(
    operator_keys: Keys,
) -> None:
    spec = spec_of(operator_keys)
    operator = StandInOperator(active=3, kept={1, 2, 3})
    kept: list[bytes] = []
    outcome, reason = roll_back_device(operator, spec, progress("box-17", 1), operator_keys.private, kept.append)
    assert (outcome, operator.active) == (Outcome.ROLLED_BACK, 1), reason
    assert "version 1" in reason and kept == operator.sent and operator.desired == kept
    # a resumed rollback sends the kept envelope again; a device already on that version counts as rolled back
    again, reason = roll_back_device(operator, spec, progress("box-17", 1, kept[0]), operator_keys.private, kept.append)
    assert again is Outcome.ROLLED_BACK and operator.sent[1] == kept[0] and len(kept) == 1, reason


def test_roll_back_device_when_the_device_ran_no_version_before_then_it_stays_active_and_says_why(
    operator_keys: Keys,
) -> None:
    operator = StandInOperator(active=3, kept={3})
    outcome, reason = roll_back_device(
        operator,
        spec_of(operator_keys),
        progress("box-17", None),
        operator_keys.private,
    )
    assert (outcome, reason) == (Outcome.ACTIVE, NO_PREVIOUS_VERSION) and operator.sent == []


# ---------------------------------------------------------------- what the store keeps for a restarted operator


def test_rollout_store_when_reopened_then_key_file_and_device_rollbacks_are_kept(
    tmp_path: Path, operator_keys: Keys
) -> None:
    key_file = operator_keys.folder / "fleet-signing.key"
    spec = spec_of(operator_keys)
    spec = RolloutSpec(**{**spec.__dict__, "rollback_key_file": key_file, "rollback_key_id": "ab" * 32})
    with RolloutStore(tmp_path / "r.db") as store:
        rollout_id = store.create(spec, [TargetDevice("box-17", previous_version=2)])
        store.set_rollback_manifest(rollout_id, "box-17", b"signed")
    with RolloutStore(tmp_path / "r.db") as store:
        record = store.load(rollout_id)
    assert record.spec.rollback_key_file == key_file and record.spec.rollback_key_id == "ab" * 32
    assert record.devices[0].rollback_manifest == b"signed" and record.devices[0].previous_version == 2
    # the kept file's key is the one that signs (and a key given in memory wins)
    assert key_id(resolve_signing_key(record.spec, None).public_key()) == key_id(operator_keys.public)  # type: ignore[union-attr]
    assert resolve_signing_key(record.spec, operator_keys.private) is operator_keys.private


def test_rollout_store_when_the_file_predates_rollback_keys_then_the_columns_are_added(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    RolloutStore(path).close()
    with sqlite3.connect(path) as db:  # the file as the first release wrote it
        for table, column in (("rollouts", "rollback_key_file"), ("rollouts", "rollback_key_id"),
                              ("rollout_devices", "rollback_manifest")):  # fmt: skip
            db.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    with RolloutStore(path) as store:
        columns = {row[1] for row in store._db.execute("PRAGMA table_info(rollout_devices)")}
    assert "rollback_manifest" in columns
