"""Version policy: versions only go up; a lower one needs an explicit, fresh rollback manifest.

A device remembers two high-water marks (kept by the artifact store): the highest version it ever
activated and the newest `created_at` of any manifest it activated. A version at or below the
high-water mark is a replay even after a rollback, so an old, validly signed manifest cannot be
sent again to move the device. A rollback manifest must be newer than every manifest the device
activated, so a captured rollback cannot be replayed later either.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from edge_sdk.core.errors import ManifestDowngradeError, ManifestReplayError, ManifestRollbackError
from edge_sdk.fleet.wire.manifest import DeploymentManifest


@dataclass(frozen=True)
class VersionState:
    """What a device has: the active version, its high-water marks and the versions still on disk."""

    current: int | None = None
    highest: int | None = None
    kept: frozenset[int] = frozenset()
    newest_created_at: datetime | None = None

    @property
    def floor(self) -> int | None:
        """A new deployment must have a version above this."""
        marks = [v for v in (self.current, self.highest) if v is not None]
        return max(marks) if marks else None

    def check(self, manifest: DeploymentManifest) -> None:
        """Raise the refusal that applies to `manifest`'s version, or return when it may be installed."""
        version = manifest.version
        if self.current is not None and version == self.current:
            raise ManifestReplayError(
                f"deployment '{manifest.deployment_id}' version {version} is already the active version; "
                f"expected a version above {self.floor}"
            )
        if manifest.rollback:
            self._check_rollback(manifest)
            return
        floor = self.floor
        if floor is None or version > floor:
            return
        if self.current is not None and version < self.current:
            raise ManifestDowngradeError(
                f"deployment '{manifest.deployment_id}' version {version} is lower than the active version "
                f"{self.current} and is not marked as a rollback; expected a version above {floor}"
            )
        raise ManifestReplayError(
            f"deployment '{manifest.deployment_id}' version {version} is not newer than version {floor} "
            f"already activated here; expected a version above {floor}"
        )

    def _check_rollback(self, manifest: DeploymentManifest) -> None:
        version = manifest.version
        if self.current is None:
            raise ManifestRollbackError(
                f"rollback to version {version}: nothing is deployed on this device to roll back from"
            )
        if version > self.current:
            raise ManifestRollbackError(
                f"rollback to version {version}: expected a version below the active version {self.current}"
            )
        if version not in self.kept:
            kept = ", ".join(str(v) for v in sorted(self.kept)) or "none (it keeps no other version)"
            raise ManifestRollbackError(
                f"rollback to version {version}: that version is no longer on this device; expected one of {kept}"
            )
        if self.newest_created_at is not None and manifest.created_at <= self.newest_created_at:
            raise ManifestReplayError(
                f"rollback to version {version} was created at {manifest.created_at.isoformat()}, not after "
                f"the newest manifest activated here ({self.newest_created_at.isoformat()}): a replayed rollback"
            )
