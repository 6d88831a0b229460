"""Rolling devices of a rollout back: one device, or every device a rollout activated (`edge-sdk fleet rollback`).

How one device goes back, first that applies:
- with the operator's signing key and the version the device reported before the rollout: a rollback
  manifest signed for that device alone (target = its id, `rollback: true`, version = its previous
  version, created now, expiring soon) — devices that ran different versions each go back to their own;
- a signed rollback manifest the operator made beforehand (`--rollback-manifest`);
- its previous desired state published again (an agent refuses a lower version without the rollback
  flag, so this only helps devices that had no deployment through desired state).
A device that ran no version before the rollout cannot be rolled back: the protocol has no command
that deactivates a deployment, so it stays active and its reason says so.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Protocol

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from edge_sdk.core.errors import CommandTimeoutError, EdgeSDKError
from edge_sdk.fleet.operator.client import DEFAULT_TIMEOUT_S, DeviceRecord, FleetOperator, manifest_of
from edge_sdk.fleet.operator.rollout_store import (
    VIA_DESIRED,
    DeviceProgress,
    Outcome,
    RolloutRecord,
    RolloutSpec,
    RolloutState,
    RolloutStore,
)
from edge_sdk.fleet.wire.manifest import DeploymentManifest, TargetSelector
from edge_sdk.fleet.wire.protocol import Response, decode_desired
from edge_sdk.fleet.wire.signing import key_id, load_private_key, sign_manifest
from edge_sdk.mqtt import MqttError

log = logging.getLogger(__name__)

DEFAULT_ROLLBACK_TTL_S = 900.0
"""How long a per-device rollback manifest stays valid: long enough for a slow device, too short to be kept."""
_REUSE_MARGIN_S = 60.0
NO_PREVIOUS_VERSION = (
    "not rolled back: the device ran no version before this rollout, so there is nothing to go back to "
    "(the protocol has no command that deactivates a deployment)"
)

SigningKey = Ed25519PrivateKey | Path
"""A private key, or the PEM file holding it (its path is kept with the rollout; the key never is)."""


def device_rollback_manifest(
    deployment: DeploymentManifest,
    device: str,
    previous_version: int,
    key: Ed25519PrivateKey,
    *,
    previous: DeploymentManifest | None = None,
    now: datetime | None = None,
    ttl_s: float = DEFAULT_ROLLBACK_TTL_S,
) -> bytes:
    """A signed rollback manifest that takes `device`, and no other, from `deployment` back to `previous_version`.

    It is created now (never earlier than `deployment` itself: a device takes a rollback only when it
    is newer than every manifest it activated) and expires `ttl_s` later. Its artifacts are those of
    `previous` when that is the manifest of `previous_version`, else `deployment`'s: for reference
    only, since a device switches back to the version it keeps on disk, checked against the manifest
    it stored for that version.
    """
    if not 1 <= previous_version < deployment.version:
        raise ValueError(f"expected a previous version from 1 to {deployment.version - 1}, got {previous_version}")
    if not ttl_s > 0:
        raise ValueError(f"expected a validity above 0 s, got {ttl_s}")
    now = now or datetime.now(timezone.utc)
    created = max(now, deployment.created_at + timedelta(milliseconds=1))
    source = previous if previous is not None and previous.version == previous_version else None
    manifest = DeploymentManifest(
        deployment_id=f"rollback-{deployment.deployment_id}"[:128],
        version=previous_version,
        created_at=created,
        expires_at=created + timedelta(seconds=ttl_s),
        target=TargetSelector(device_ids=[device]),
        artifacts=list((source or deployment).artifacts),
        health_check=source.health_check if source is not None else None,
        rollback=True,
        description=(
            f"rollback of {device} from version {deployment.version} ({deployment.deployment_id}) "
            f"to version {previous_version}"
        )[:1024],
    )
    return sign_manifest(manifest, key).to_bytes()


def resolve_signing_key(spec: RolloutSpec, given: SigningKey | None) -> Ed25519PrivateKey | None:
    """The key that signs per-device rollbacks: `given`, else the key file kept with the rollout (SigningKeyError
    when it cannot be read), else None."""
    if isinstance(given, Ed25519PrivateKey):
        key: Ed25519PrivateKey | None = given
    else:
        path = given if given is not None else spec.rollback_key_file
        key = load_private_key(path) if path is not None else None
    if key is None:
        if spec.rollback_key_id is not None:
            log.warning(
                "the rollout signs rollbacks with key %s… but no key was given: a failing wave goes back through %s",
                spec.rollback_key_id[:16],
                "its rollback manifest" if spec.rollback_manifest is not None else "its previous desired state",
            )
        return None
    if spec.rollback_key_id is not None and key_id(key.public_key()) != spec.rollback_key_id:
        log.warning("rollbacks are signed with key %s…, not the rollout's key %s…", key_id(key.public_key())[:16],
                    spec.rollback_key_id[:16])  # fmt: skip
    return key


def _previous_manifest(device: DeviceProgress) -> DeploymentManifest | None:
    """The deployment of the device's previous desired state, when it can be read."""
    if device.previous_desired is None:
        return None
    try:
        desired = decode_desired(device.previous_desired)
        return manifest_of(desired.deployment.encode("utf-8")) if desired.deployment is not None else None
    except (EdgeSDKError, ValueError):
        return None


def _device_envelope(
    spec: RolloutSpec,
    device: DeviceProgress,
    previous_version: int,
    key: Ed25519PrivateKey,
    remember: Callable[[bytes], None] | None,
) -> bytes:
    """The device's kept rollback manifest while it is still valid for a while, else a new one (kept first)."""
    now = datetime.now(timezone.utc)
    if device.rollback_manifest is not None:
        try:
            kept = manifest_of(device.rollback_manifest)
            if kept.version == previous_version and kept.expires_at > now + timedelta(seconds=_REUSE_MARGIN_S):
                return device.rollback_manifest  # the same envelope again: a device that applied it answers active
        except EdgeSDKError:
            pass
    envelope = device_rollback_manifest(
        manifest_of(spec.manifest), device.device, previous_version, key, previous=_previous_manifest(device), now=now
    )
    if remember is not None:
        remember(envelope)
    return envelope


class RollbackOperator(Protocol):
    """What rolling one device back needs of the operator (FleetOperator has it)."""

    def request(
        self, device: str, name: str, args: dict[str, Any] | None = None, timeout: float = DEFAULT_TIMEOUT_S
    ) -> Response: ...

    def publish_desired(
        self, device: str, deployment: bytes | None, pipelines: Iterable[str] | None = None
    ) -> object: ...

    def wait_for(self, predicate: Callable[[DeviceRecord], bool], device: str, timeout: float) -> bool: ...


def restore_desired(operator: RollbackOperator, device: str, previous: bytes) -> None:
    """Publish the previous desired state's deployment and pipelines again, under a new revision."""
    desired = decode_desired(previous)
    deployment = desired.deployment.encode("utf-8") if desired.deployment is not None else None
    operator.publish_desired(device, deployment, desired.pipelines)


def roll_back_device(
    operator: RollbackOperator,
    spec: RolloutSpec,
    device: DeviceProgress,
    key: Ed25519PrivateKey | None = None,
    remember: Callable[[bytes], None] | None = None,
) -> tuple[Outcome, str]:
    """Take one device back to the version it ran before the rollout (see the module docstring for how).

    `remember` keeps a per-device rollback manifest before it is sent (the rollout store).
    """
    name = device.device
    previous = device.previous_version
    if key is not None and previous is not None and previous < spec.version:
        envelope = _device_envelope(spec, device, previous, key, remember)
        return _send_rollback(operator, spec, name, envelope, "rollback manifest signed for this device")
    if spec.rollback_manifest is not None:
        return _send_rollback(operator, spec, name, spec.rollback_manifest, "rollback manifest")
    if previous is None:
        return Outcome.ACTIVE, NO_PREVIOUS_VERSION
    if device.previous_desired is None:
        return Outcome.ACTIVE, "not rolled back: no signing key, no rollback manifest and no previous desired state"
    try:
        restore_desired(operator, name, device.previous_desired)
    except (MqttError, EdgeSDKError) as exc:
        return Outcome.ACTIVE, f"rollback failed: {exc}"
    confirmed = operator.wait_for(lambda r: r.active_version == previous, name, spec.command_timeout_s)
    if confirmed:
        return Outcome.ROLLED_BACK, f"rolled back to version {previous} (desired state)"
    return Outcome.ACTIVE, f"desired state set back to version {previous}; the device has not confirmed it"


def _send_rollback(
    operator: RollbackOperator, spec: RolloutSpec, name: str, envelope: bytes, how: str
) -> tuple[Outcome, str]:
    """Send `rollback` with a signed rollback envelope; once done, it is the device's desired deployment too."""
    version = manifest_of(envelope).version
    try:
        response = operator.request(name, "rollback", {"manifest": envelope.decode("utf-8")}, spec.command_timeout_s)
    except (CommandTimeoutError, MqttError) as exc:
        return Outcome.ACTIVE, f"rollback failed: {exc}"
    if not response.ok:
        error = response.error
        # Refused as a replay while already on that version: an earlier attempt went through.
        if (
            error is not None
            and error.detail == "replay"
            and operator.wait_for(lambda r: r.active_version == version, name, 2.0)
        ):
            return Outcome.ROLLED_BACK, f"rolled back to version {version} (already running it)"
        if error is None:
            return Outcome.ACTIVE, "rollback refused: the device answered ok=false without an error"
        detail = f" ({error.detail})" if error.detail else ""
        return Outcome.ACTIVE, f"rollback refused: {error.reason}{detail}: {error.message}"
    try:
        operator.publish_desired(name, envelope)
    except MqttError as exc:
        log.warning("could not publish the desired state of %s: %s", name, exc)
    return Outcome.ROLLED_BACK, f"rolled back to version {version} ({how})"


def roll_back_rollout(
    operator: FleetOperator,
    store: RolloutStore,
    rollout_id: str,
    max_parallel: int = 32,
    signing_key: SigningKey | None = None,
) -> RolloutRecord:
    """Roll back every device of a rollout that runs its version, and mark the rollout rolled back.

    `signing_key` (else the key file kept with the rollout) signs a rollback manifest per device.
    Devices that only got the desired state (offline) get their previous desired state back.
    """
    record = store.load(rollout_id)
    key = resolve_signing_key(record.spec, signing_key)
    active = [d for d in record.devices if d.outcome is Outcome.ACTIVE]
    offline = [d for d in record.devices if d.outcome is Outcome.SENT and d.via == VIA_DESIRED]
    for device in offline:
        if device.previous_desired is not None:
            restore_desired(operator, device.device, device.previous_desired)
        else:
            operator.publish_desired(device.device, None)
        store.set_outcome(rollout_id, device.device, Outcome.PENDING, "not applied: rollout rolled back")

    def one(device: DeviceProgress) -> tuple[Outcome, str]:
        def remember(envelope: bytes) -> None:
            store.set_rollback_manifest(rollout_id, device.device, envelope)

        return roll_back_device(operator, record.spec, device, key, remember)

    with ThreadPoolExecutor(max_workers=max_parallel, thread_name_prefix="rollback") as executor:
        futures = {d.device: executor.submit(one, d) for d in active}
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
