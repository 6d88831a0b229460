"""Planning a staged rollout: which devices it targets and the spec it is recorded with (`RolloutRunner` runs it).

    rollout_id = create_rollout(operator, store, envelope, first_wave=5, rate_per_min=60, abort_threshold=0.2)

Targets are the devices of the registry that both the manifest's target and `selector` select (online
first), plus device ids named explicitly that were never seen (treated as offline). The store puts them
in waves in that order: the first `first_wave` devices, then waves of what `rate_per_min` sends in a minute.
"""

from __future__ import annotations

from pathlib import Path

from edge_sdk.fleet.operator.client import DeviceRecord, FleetOperator, manifest_of
from edge_sdk.fleet.operator.rollout_rollback import SigningKey
from edge_sdk.fleet.operator.rollout_store import RolloutSpec, RolloutStore, TargetDevice
from edge_sdk.fleet.wire.manifest import TargetSelector
from edge_sdk.fleet.wire.signing import key_id, load_private_key

__all__ = ["create_rollout", "select_targets"]


def select_targets(operator: FleetOperator, envelope: bytes, selector: TargetSelector | None) -> list[TargetDevice]:
    """Devices both the manifest and `selector` select: online ones first, then by id."""
    manifest = manifest_of(envelope)
    chosen: list[DeviceRecord] = []
    for record in operator.devices():
        if record.presence is None or record.presence.profile is None:
            continue  # only a last will seen: profile and labels unknown
        identity = record.identity
        if manifest.target.matches(identity) and (selector is None or selector.matches(identity)):
            chosen.append(record)
    chosen.sort(key=lambda r: (not r.online, r.device))
    known = {r.device for r in operator.devices() if r.presence is not None and r.presence.profile is not None}
    named = selector.device_ids if selector is not None and selector.device_ids else []
    unseen = [DeviceRecord(name) for name in named if name not in known]
    return [
        TargetDevice(r.device, previous_version=r.active_version, previous_desired=r.desired_payload)
        for r in chosen + unseen
    ]


def create_rollout(
    operator: FleetOperator,
    store: RolloutStore,
    envelope: bytes,
    *,
    selector: TargetSelector | None = None,
    first_wave: int = 1,
    rate_per_min: float = 60.0,
    abort_threshold: float = 0.2,
    command_timeout_s: float = 30.0,
    rollback_manifest: bytes | None = None,
    artifacts_dir: Path | None = None,
    rollout_id: str | None = None,
    signing_key: SigningKey | None = None,
    broker_file: Path | None = None,
) -> str:
    """Choose the targets from the operator's registry (call `operator.settle()` first) and record the rollout.

    Devices known from earlier runs (the store keeps their last facts) are selected while offline too.
    Each device's version before the rollout is recorded (from its presence or reported state). With
    `signing_key` (the operator's Ed25519 key, or its PEM file) a failing wave's devices are rolled back
    with a rollback manifest signed for each; a key file's path is kept with the rollout so a restarted
    operator finds it, a key object is not (give it to `RolloutRunner` / `roll_back_rollout` too).
    `broker_file` (the operator's broker settings) is kept the same way, for `fleet resume` and `rollback`.
    """
    manifest = manifest_of(envelope)
    key_file = signing_key if isinstance(signing_key, Path) else None
    key = load_private_key(signing_key) if isinstance(signing_key, Path) else signing_key
    operator.remember(store.device_facts())
    store.remember_devices(r.presence for r in operator.devices() if r.presence is not None and r.online)
    if rollback_manifest is not None:
        rollback = manifest_of(rollback_manifest)
        if not rollback.rollback or rollback.version >= manifest.version:
            raise ValueError(
                f"expected a rollback manifest (rollback: true) below version {manifest.version}, "
                f"got version {rollback.version}{'' if rollback.rollback else ', not marked as a rollback'}"
            )
    spec = RolloutSpec(
        manifest=envelope,
        deployment_id=manifest.deployment_id,
        version=manifest.version,
        selector=selector or TargetSelector(),
        first_wave=first_wave,
        rate_per_min=rate_per_min,
        abort_threshold=abort_threshold,
        command_timeout_s=command_timeout_s,
        rollback_manifest=rollback_manifest,
        artifacts_dir=artifacts_dir,
        rollback_key_file=key_file.resolve() if key_file is not None else None,
        rollback_key_id=key_id(key.public_key()) if key is not None else None,
        broker_file=broker_file.resolve() if broker_file is not None else None,
    )
    return store.create(spec, select_targets(operator, envelope, selector), rollout_id)
