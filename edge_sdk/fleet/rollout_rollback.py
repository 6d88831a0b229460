"""Rolling devices of a rollout back: one device (signed rollback manifest, else its previous desired
state), or every device a rollout activated (`edge-sdk fleet rollback`)."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

from edge_sdk.errors import EdgeSDKError
from edge_sdk.mqtt import MqttError

from .operator import CommandTimeoutError, FleetOperator, manifest_of
from .protocol import decode_desired
from .rollout_store import (
    VIA_DESIRED,
    DeviceProgress,
    Outcome,
    RolloutRecord,
    RolloutSpec,
    RolloutState,
    RolloutStore,
)

log = logging.getLogger(__name__)


def restore_desired(operator: FleetOperator, device: str, previous: bytes) -> None:
    """Publish the previous desired state's deployment and pipelines again, under a new revision."""
    desired = decode_desired(previous)
    deployment = desired.deployment.encode("utf-8") if desired.deployment is not None else None
    operator.publish_desired(device, deployment, desired.pipelines)


def roll_back_device(operator: FleetOperator, spec: RolloutSpec, device: DeviceProgress) -> tuple[Outcome, str]:
    """Take one device back to its previous version: the signed rollback manifest, else its previous desired state."""
    name = device.device
    if spec.rollback_manifest is not None:
        try:
            response = operator.request(
                name, "rollback", {"manifest": spec.rollback_manifest.decode("utf-8")}, spec.command_timeout_s
            )
        except (CommandTimeoutError, MqttError) as exc:
            return Outcome.ACTIVE, f"rollback failed: {exc}"
        if not response.ok:
            error = response.error
            return (
                Outcome.ACTIVE,
                f"rollback refused: {error.reason if error else '?'}: {error.message if error else ''}",
            )
        rollback_version = manifest_of(spec.rollback_manifest).version
        try:
            operator.publish_desired(name, spec.rollback_manifest)
        except MqttError as exc:
            log.warning("could not publish the desired state of %s: %s", name, exc)
        return Outcome.ROLLED_BACK, f"rolled back to version {rollback_version} (rollback manifest)"
    if device.previous_desired is None:
        return Outcome.ACTIVE, "not rolled back: no rollback manifest and no previous desired state"
    try:
        restore_desired(operator, name, device.previous_desired)
    except (MqttError, EdgeSDKError) as exc:
        return Outcome.ACTIVE, f"rollback failed: {exc}"
    previous = device.previous_version
    confirmed = operator.wait_for(lambda r: r.active_version == previous, name, spec.command_timeout_s)
    if confirmed:
        return Outcome.ROLLED_BACK, f"rolled back to version {previous} (desired state)"
    return Outcome.ACTIVE, f"desired state set back to version {previous}; the device has not confirmed it"


def roll_back_rollout(
    operator: FleetOperator, store: RolloutStore, rollout_id: str, max_parallel: int = 32
) -> RolloutRecord:
    """Roll back every device of a rollout that runs its version, and mark the rollout rolled back.

    Devices that only got the desired state (offline) get their previous desired state back.
    """
    record = store.load(rollout_id)
    active = [d for d in record.devices if d.outcome is Outcome.ACTIVE]
    offline = [d for d in record.devices if d.outcome is Outcome.SENT and d.via == VIA_DESIRED]
    for device in offline:
        if device.previous_desired is not None:
            restore_desired(operator, device.device, device.previous_desired)
        else:
            operator.publish_desired(device.device, None)
        store.set_outcome(rollout_id, device.device, Outcome.PENDING, "not applied: rollout rolled back")
    with ThreadPoolExecutor(max_workers=max_parallel, thread_name_prefix="rollback") as executor:
        futures = {d.device: executor.submit(roll_back_device, operator, record.spec, d) for d in active}
        for name, future in futures.items():
            outcome, reason = future.result()
            store.set_outcome(rollout_id, name, outcome, reason)
    still = sum(1 for d in store.load(rollout_id).devices if d.outcome is Outcome.ACTIVE)
    store.set_state(
        rollout_id,
        RolloutState.ROLLED_BACK,
        f"rolled back by the operator ({len(active) - still} of {len(active)} active devices rolled back)",
    )
    return store.load(rollout_id)
