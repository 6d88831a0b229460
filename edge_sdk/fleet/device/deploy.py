"""One deployment on the device: verify, receive artifacts, stage, build + health check, activate; or refuse.

The order is what keeps a device safe: nothing is written before the signed manifest is verified
(signature, expiry, target, version policy); nothing is activated before every artifact matches its
SHA-256 and the health check passed on the committed (not yet active) version; a failure after the
switch rolls back to the version that ran before. Inline artifacts arrive as chunks into resumable
transfers (`ChunkAssembler`), so a deploy answered with `need_chunks` resumes where it stopped, even
after the agent restarted.

Not thread-safe: the agent calls a `Deployer` from its one worker thread.
"""

from __future__ import annotations

import hashlib
import json
import logging
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from edge_sdk.core.errors import (
    ArtifactError,
    ArtifactHashError,
    ChunkError,
    FleetError,
    ManifestError,
    ManifestRollbackError,
)
from edge_sdk.engines.cache import EngineCache
from edge_sdk.fleet.device.artifacts import ArtifactStore
from edge_sdk.fleet.device.health import HealthCheckError, run_health_check
from edge_sdk.fleet.device.staging import write_file_atomically
from edge_sdk.fleet.wire.chunks import ChunkAssembler, ChunkOutcome, decode_chunk
from edge_sdk.fleet.wire.manifest import DeploymentManifest, DeviceIdentity, InlineSource, UrlSource
from edge_sdk.fleet.wire.protocol import ACTIVATION_FAILED, DEPLOY_FAILED, HEALTH_FAILED, REFUSED
from edge_sdk.fleet.wire.signing import verify_manifest
from edge_sdk.profiles import DeviceProfile

log = logging.getLogger(__name__)

MAX_PENDING_VERSIONS = 2
ACTIVE_ENVELOPE = "active-envelope.json"
"""In the store root: SHA-256 of the envelope that made the current version active (idempotent resends)."""
MAX_MISSING_RANGES = 256
DOWNLOAD_TIMEOUT_S = 60.0
_BLOCK = 1 << 20

Status = Literal["need_chunks", "active", "refused", "health_failed", "activation_failed", "deploy_failed"]


@dataclass(frozen=True)
class DeployResult:
    """What a deploy (or rollback) came to; `active_version` is what the device runs afterwards."""

    status: Status
    version: int | None
    active_version: int | None
    message: str | None = None
    detail: str | None = None
    missing: dict[str, list[list[int]]] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status in ("active", "need_chunks")

    @property
    def outcome(self) -> Literal["active", "rolled_back", "refused", "failed"] | None:
        """The reported-state outcome (None while chunks are still missing)."""
        if self.status == "need_chunks":
            return None
        if self.status == "active":
            return "active"
        if self.status in ("health_failed", "activation_failed"):
            return "rolled_back"
        if self.status == "refused":
            return "refused"
        return "failed"

    def result(self) -> dict[str, Any]:
        """The `result` of the deploy Response."""
        if self.status == "need_chunks":
            return {"status": "need_chunks", "version": self.version, "missing": self.missing}
        result: dict[str, Any] = {"status": self.status, "version": self.version, "active_version": self.active_version}
        if self.facts:
            result["facts"] = self.facts
        return result

    @property
    def error_reason(self) -> str:
        return {
            "refused": REFUSED,
            "health_failed": HEALTH_FAILED,
            "activation_failed": ACTIVATION_FAILED,
        }.get(self.status, DEPLOY_FAILED)


@dataclass
class _Pending:
    manifest: DeploymentManifest
    signed: bytes
    transfers: dict[str, ChunkAssembler]

    def close(self) -> None:
        for assembler in self.transfers.values():
            assembler.close()

    @property
    def complete(self) -> bool:
        return all(t.complete for t in self.transfers.values())


class Deployer:
    """Runs deployments into `store` for this device (identity and profile are read at each deploy)."""

    def __init__(
        self,
        store: ArtifactStore,
        trusted_keys: Iterable[Ed25519PublicKey],
        identity: Callable[[], DeviceIdentity],
        profile: Callable[[], DeviceProfile],
        now: Callable[[], datetime],
        cache: EngineCache | None = None,
        on_activated: Callable[[int], None] | None = None,
    ):
        self.store = store
        self.trusted_keys = list(trusted_keys)
        self._identity = identity
        self._profile = profile
        self._now = now
        self._cache = cache
        self._on_activated = on_activated
        self._pending: dict[int, _Pending] = {}

    # ---------------------------------------------------------------- deploy / rollback
    def deploy(self, signed: bytes, require_rollback: bool = False) -> DeployResult:
        """Deploy (or, for a rollback manifest, switch back to) what `signed` describes. Idempotent.

        `require_rollback` refuses anything but an explicit rollback manifest (the `rollback` command).
        """
        signed = bytes(signed)
        current = self.store.current_version()
        if current is not None and self._is_active_envelope(signed, current):
            return DeployResult("active", current, current, message="already active")
        try:
            manifest = verify_manifest(
                signed, self.trusted_keys, self._identity(), self._now(), self.store.version_state()
            )
            if require_rollback and not manifest.rollback:
                raise ManifestRollbackError(
                    f"deployment '{manifest.deployment_id}' version {manifest.version}: expected a rollback "
                    "manifest (rollback: true), got a deployment"
                )
        except ManifestError as exc:
            log.warning("deployment refused (%s): %s", exc.reason, exc)
            return DeployResult("refused", None, current, message=str(exc), detail=exc.reason)
        if manifest.rollback:
            result = self._rollback(manifest, current)
        else:
            try:
                pending = self._pending_for(manifest, signed)
                missing = self._missing(pending)
                if missing:
                    return DeployResult("need_chunks", manifest.version, current, missing=missing)
                result = self._install(pending, current)
            except FleetError as exc:
                dropped = self._pending.pop(manifest.version, None)
                if dropped is not None:  # resumed from disk by the next deploy
                    dropped.close()
                log.warning("deployment of version %d failed (%s): %s", manifest.version, exc.reason, exc)
                return DeployResult("deploy_failed", manifest.version, current, message=str(exc), detail=exc.reason)
        if result.status == "active":
            self._remember_active(signed, manifest.version)
        return result

    def accept_chunk(self, version: int, artifact: str, payload: bytes) -> bool:
        """Store one chunk message of a pending deployment; True when that deployment has all its chunks now.

        Chunks of a version no verified deploy asked for are dropped (nobody can fill the disk with junk).
        """
        pending = self._pending.get(version)
        if pending is None or artifact not in pending.transfers:
            log.info("dropped a chunk of %s for version %d: no pending deployment asked for it", artifact, version)
            return False
        chunk = decode_chunk(payload)
        if chunk.version != version or chunk.artifact != artifact:
            raise ChunkError(
                f"chunk says version {chunk.version} artifact '{chunk.artifact}', its topic says {version}/{artifact}"
            )
        outcome = pending.transfers[artifact].accept_chunk(chunk)
        return outcome is ChunkOutcome.ACCEPTED and pending.complete

    def pending_versions(self) -> list[int]:
        return sorted(self._pending)

    def close(self) -> None:
        for pending in self._pending.values():
            pending.close()
        self._pending.clear()

    # ---------------------------------------------------------------- steps
    def _is_active_envelope(self, signed: bytes, current: int) -> bool:
        """True when `signed` is the envelope that made `current` active (a resent deploy or rollback)."""
        try:
            record = json.loads((self.store.root / ACTIVE_ENVELOPE).read_text())
            return bool(record["version"] == current and record["sha256"] == hashlib.sha256(signed).hexdigest())
        except (OSError, ValueError, KeyError, TypeError):
            return False

    def _remember_active(self, signed: bytes, version: int) -> None:
        record = {"version": version, "sha256": hashlib.sha256(signed).hexdigest()}
        write_file_atomically(self.store.root / ACTIVE_ENVELOPE, json.dumps(record).encode())

    def _pending_for(self, manifest: DeploymentManifest, signed: bytes) -> _Pending:
        pending = self._pending.get(manifest.version)
        if pending is not None and pending.signed != signed:
            pending.close()  # a re-signed manifest for the same version: start over with its artifacts
            pending = None
        if pending is None:
            for old in sorted(self._pending)[: max(0, len(self._pending) - MAX_PENDING_VERSIONS + 1)]:
                self._pending.pop(old).close()
            transfers = {
                artifact.name: ChunkAssembler(self.store.transfer_dir(manifest.version), artifact)
                for artifact in manifest.artifacts
                if isinstance(artifact.source, InlineSource)
            }
            pending = _Pending(manifest, bytes(signed), transfers)
            self._pending[manifest.version] = pending
        return pending

    def _missing(self, pending: _Pending) -> dict[str, list[list[int]]]:
        return {
            name: [[first, last] for first, last in transfer.missing_ranges(limit=MAX_MISSING_RANGES)]
            for name, transfer in pending.transfers.items()
            if not transfer.complete
        }

    def _install(self, pending: _Pending, current: int | None) -> DeployResult:
        manifest = pending.manifest
        version = manifest.version
        with self.store.stage(manifest, pending.signed) as staging:
            for artifact in manifest.artifacts:
                if isinstance(artifact.source, InlineSource):
                    transfer = pending.transfers[artifact.name]
                    try:
                        path = transfer.finish()
                    except ArtifactHashError as exc:  # bad chunks were dropped: ask for them again
                        log.warning("version %d: %s", version, exc)
                        return DeployResult("need_chunks", version, current, missing=self._missing(pending))
                    staging.add_file(artifact.name, path, move=True)
                elif isinstance(artifact.source, UrlSource):
                    self._download(artifact.source.url, staging.writer(artifact.name), artifact.size)
            staging.commit()
        self._pending.pop(version).close()
        try:
            facts = run_health_check(self.store, version, self._profile(), self._cache)
        except HealthCheckError as exc:
            self.store.discard_version(version)
            kept = self.store.current_version()
            log.warning("version %d failed its health check, %s: %s", version, _still_running(kept), exc)
            return DeployResult(
                "health_failed", version, kept, message=f"{exc}; {_still_running(kept)}", detail=exc.reason
            )
        return self._activate(manifest, current, facts)

    def _activate(self, manifest: DeploymentManifest, current: int | None, facts: dict[str, Any]) -> DeployResult:
        version = manifest.version
        try:
            self.store.activate(version, manifest)
            if self._on_activated is not None:
                self._on_activated(version)
        except Exception as exc:  # whatever broke the switch, the device must end on a version that ran
            now_active = self.store.current_version()
            if now_active == version and current is not None:
                now_active = self.store.rollback()
            message = f"activating version {version} failed: {exc}; {_still_running(now_active)}"
            log.error("%s", message)
            if now_active is not None and self._on_activated is not None:
                try:  # bring back what ran before (e.g. its pipelines)
                    self._on_activated(now_active)
                except Exception as again:
                    log.error("restoring version %d after the failed activation failed too: %s", now_active, again)
            return DeployResult("activation_failed", version, now_active, message=message, detail="activation")
        log.info("version %d is active (%s)", version, f"was {current}" if current is not None else "the first here")
        return DeployResult("active", version, version, facts=facts)

    def _rollback(self, manifest: DeploymentManifest, current: int | None) -> DeployResult:
        version = manifest.version
        try:
            self.store.verify_version(version)
            facts = run_health_check(self.store, version, self._profile(), self._cache)
        except HealthCheckError as exc:
            return DeployResult("health_failed", version, current, message=f"{exc}; {_still_running(current)}")
        except FleetError as exc:
            return DeployResult("deploy_failed", version, current, message=str(exc), detail=exc.reason)
        return self._activate(manifest, current, facts)

    def _download(self, url: str, writer: Any, size: int) -> None:
        received = 0  # the manifest allows only http(s) URLs, and the writer checks size and SHA-256
        try:
            with writer, urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response:
                while block := response.read(_BLOCK):
                    received += len(block)
                    if received > size:
                        raise ArtifactHashError(f"{url}: more than the manifest's {size} bytes")
                    writer.write(block)
        except OSError as exc:
            raise ArtifactError(f"download of {url} failed: {exc}") from None


def _still_running(version: int | None) -> str:
    """What a failed deploy left running, for its message."""
    return f"kept version {version}" if version is not None else "no version is active"
