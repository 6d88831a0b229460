"""The device's artifact store: one folder per version, a `current` symlink switched atomically.

    <root>/current -> versions/7          switched by rename; readers use <root>/current/artifacts/<name>
    <root>/versions/<version>/manifest.json, manifest.signed, artifacts/<name>
    <root>/staging/<version>-<random>/    a deployment being written; never seen by readers
    <root>/transfers/<version>/           resumable chunk transfers (see chunks.py)
    <root>/state.json                     activation history and the replay high-water marks

Only `activate` and `rollback` move `current`; a staging that fails or is abandoned leaves it alone.
Every artifact path is a checked file name resolved inside its version folder; a symlink planted in
the store is refused, never followed out.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import shutil
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from filelock import FileLock

from edge_sdk.core.errors import ArtifactError, ArtifactHashError, ArtifactPathError, ManifestFormatError
from edge_sdk.fleet.device.staging import Staging, fsync_dir, write_file_atomically
from edge_sdk.fleet.wire.artifact_files import checked_name, sha256_file
from edge_sdk.fleet.wire.manifest import DeploymentManifest, decode_manifest
from edge_sdk.fleet.wire.versions import VersionState

log = logging.getLogger(__name__)

_HISTORY_LIMIT = 64
_VERSION_NAME = re.compile(r"0|[1-9][0-9]{0,18}")


class ArtifactStore:
    """Versions of deployed artifacts under `root`; keeps the newest `keep` versions plus current and previous."""

    def __init__(self, root: Path, keep: int = 3):
        if keep < 2:
            raise ValueError(f"keep must be at least 2 (current and previous), got {keep}")
        self.keep = keep
        root.mkdir(parents=True, exist_ok=True)
        self.root = root.resolve()
        self._versions = self.root / "versions"
        for folder in (self._versions, self.root / "staging", self.root / "transfers"):
            folder.mkdir(exist_ok=True)
            if folder.is_symlink() or not folder.resolve().is_relative_to(self.root):
                raise ArtifactPathError(f"{folder}: expected a folder inside the store, got a symlink out of it")
        self._lock = FileLock(str(self.root / ".lock"))

    # ---------------------------------------------------------------- queries
    def versions(self) -> list[int]:
        """Committed versions on disk, oldest first."""
        found = []
        for entry in self._versions.iterdir():
            if _VERSION_NAME.fullmatch(entry.name) and not entry.is_symlink():
                found.append(int(entry.name))
        return sorted(found)

    def current_version(self) -> int | None:
        link = self.root / "current"
        if not link.is_symlink():
            if link.exists():
                raise ArtifactPathError(f"{link}: expected a symlink to versions/<version>, got a regular file")
            return None
        target = os.readlink(link)
        prefix, _, name = target.partition("/")
        if prefix != "versions" or not _VERSION_NAME.fullmatch(name):
            raise ArtifactPathError(f"{link}: expected a link to versions/<version>, got a link to {target!r}")
        return int(name)

    def previous_version(self) -> int | None:
        """The version `rollback()` would activate."""
        history = self._history()
        current = self.current_version()
        on_disk = set(self.versions())
        for version in reversed(history):
            if version != current and version in on_disk:
                return version
        return None

    def version_dir(self, version: int) -> Path:
        folder = self._versions / str(int(version))
        if folder.is_symlink() or not folder.is_dir():
            if folder.is_symlink():
                raise ArtifactPathError(f"{folder}: expected a version folder, got a symlink")
            raise ArtifactError(
                f"version {version} is not in the store; expected one of "
                + (", ".join(str(v) for v in self.versions()) or "none (the store holds no version)")
            )
        return folder

    def artifact_path(self, name: str, version: int | None = None) -> Path:
        """Path of artifact `name` of `version` (default: current), checked to be a file inside the store."""
        checked_name(name)
        if version is None:
            version = self.current_version()
            if version is None:
                raise ArtifactError("no version is active yet")
        folder = self.version_dir(version) / "artifacts"
        path = folder / name
        if path.is_symlink():
            raise ArtifactPathError(f"{path}: expected a regular file, got a symlink (the store was tampered with)")
        if not path.resolve().is_relative_to(folder.resolve()) or not folder.resolve().is_relative_to(self.root):
            raise ArtifactPathError(f"{path}: resolves outside the store")
        if not path.is_file():
            raise ArtifactError(f"artifact '{name}' is not in version {version}")
        return path

    def manifest(self, version: int | None = None) -> DeploymentManifest:
        if version is None:
            version = self.current_version()
            if version is None:
                raise ArtifactError("no version is active yet")
        path = self.version_dir(version) / "manifest.json"
        try:
            return decode_manifest(path.read_bytes(), max_bytes=path.stat().st_size)
        except (OSError, ManifestFormatError) as exc:
            raise ArtifactError(f"{path}: cannot read the stored manifest ({exc})") from None

    def version_state(self) -> VersionState:
        """What `verify_manifest` needs to judge a new manifest's version."""
        state = self._read_state()
        current = self.current_version()
        highest = max((v for v in (state.highest, current) if v is not None), default=None)
        return VersionState(
            current=current, highest=highest, kept=frozenset(self.versions()), newest_created_at=state.newest_created_at
        )

    def transfer_dir(self, version: int) -> Path:
        """Folder for resumable chunk transfers of `version`; removed when that version is activated."""
        folder = self.root / "transfers" / str(int(version))
        folder.mkdir(exist_ok=True)
        return folder

    def verify_version(self, version: int) -> None:
        """Re-hash every artifact of `version` against its stored manifest (e.g. before a rollback)."""
        for artifact in self.manifest(version).artifacts:
            got, size = sha256_file(self.artifact_path(artifact.name, version))
            if size != artifact.size or got != artifact.sha256:
                raise ArtifactHashError(
                    f"version {version} artifact '{artifact.name}': expected sha256 {artifact.sha256}, got {got}"
                )

    # ---------------------------------------------------------------- changes
    def stage(self, manifest: DeploymentManifest, signed: bytes | None = None) -> Staging:
        """Start writing `manifest`'s artifacts into a private staging folder."""
        for artifact in manifest.artifacts:  # again: a manifest may have been built without validation
            checked_name(artifact.name)
        need = sum(a.size for a in manifest.artifacts)
        free = shutil.disk_usage(self.root).free
        if need > free:
            raise ArtifactError(f"version {manifest.version} needs {need} bytes, the store has {free} free")
        folder = self.root / "staging" / f"{manifest.version}-{secrets.token_hex(6)}"
        (folder / "artifacts").mkdir(parents=True, mode=0o755)
        return Staging(manifest, signed, folder, install=self._install)

    def activate(self, version: int, manifest: DeploymentManifest | None = None) -> None:
        """Switch `current` to `version` in one rename; the old version stays on disk.

        `manifest` is the manifest that asked for this (an explicit rollback's); by default the
        version's own. Its version and creation time raise the replay high-water marks.
        """
        if manifest is not None and manifest.version != version:
            raise ValueError(f"activate({version}) was given the manifest of version {manifest.version}")
        with self._lock:
            stored = self.manifest(version)
            for artifact in stored.artifacts:
                path = self.artifact_path(artifact.name, version)
                if path.stat().st_size != artifact.size:
                    raise ArtifactHashError(f"version {version} artifact '{artifact.name}' has the wrong size")
            self._point_current_at(version)
            state = self._read_state()
            created = (manifest or stored).created_at
            self._write_state(
                _State(
                    history=[*state.history, version][-_HISTORY_LIMIT:],
                    highest=max(version, state.highest or 0),
                    newest_created_at=max(created, state.newest_created_at or created),
                )
            )
            shutil.rmtree(self.root / "transfers" / str(version), ignore_errors=True)
            self._prune()
        log.info("activated version %d", version)

    def rollback(self) -> int:
        """Undo the last activation: switch `current` back to the version active before it."""
        with self._lock:
            previous = self.previous_version()
            if previous is None:
                current = self.current_version()
                active = f"current: {current}" if current is not None else "no version is active"
                raise ArtifactError(f"no previous version to roll back to ({active})")
            self._point_current_at(previous)
            state = self._read_state()
            while state.history and state.history[-1] != previous:
                state.history.pop()
            self._write_state(state)
        log.info("rolled back to version %d", previous)
        return previous

    def discard_version(self, version: int) -> None:
        """Delete a committed version that must not be used (e.g. it failed its health check before activation)."""
        with self._lock:
            if version == self.current_version():
                raise ArtifactError(f"version {version} is active; roll back or activate another version first")
            folder = self.version_dir(version)
            doomed = self.root / "staging" / f"{version}-discarded-{secrets.token_hex(6)}"
            os.replace(folder, doomed)
            shutil.rmtree(doomed, ignore_errors=True)

    def remove_stale(self) -> None:
        """Remove leftovers of an interrupted run: staging folders, temp links, finished transfers."""
        for entry in (self.root / "staging").iterdir():
            shutil.rmtree(entry, ignore_errors=True)
        for entry in self.root.glob(".current.*"):
            entry.unlink(missing_ok=True)
        floor = self.version_state().floor
        for entry in (self.root / "transfers").iterdir():
            if floor is not None and entry.name.isdigit() and int(entry.name) <= floor:
                shutil.rmtree(entry, ignore_errors=True)

    # ---------------------------------------------------------------- internals
    def _install(self, staged: Path, version: int) -> None:
        with self._lock:
            target = self._versions / str(version)
            if target.exists() or target.is_symlink():
                if version == self.current_version():
                    raise ArtifactError(f"version {version} is active; it cannot be replaced by a new staging")
                old = self.root / "staging" / f"{version}-replaced-{secrets.token_hex(6)}"
                os.replace(target, old)
                shutil.rmtree(old, ignore_errors=True)
            os.replace(staged, target)
            fsync_dir(self._versions)

    def _point_current_at(self, version: int) -> None:
        self.version_dir(version)
        temp = self.root / f".current.{secrets.token_hex(6)}"
        os.symlink(f"versions/{version}", temp)
        os.replace(temp, self.root / "current")
        fsync_dir(self.root)

    def _history(self) -> list[int]:
        history = self._read_state().history
        current = self.current_version()
        if current is not None and (not history or history[-1] != current):
            history.append(current)  # the link moved but the state write did not happen (crash)
        return history

    def _prune(self) -> None:
        versions = self.versions()
        keep = set(versions[-self.keep :]) | {self.current_version(), self.previous_version()}
        for version in versions:
            if version not in keep:
                shutil.rmtree(self._versions / str(version), ignore_errors=True)
                log.info("removed old version %d", version)

    def _read_state(self) -> _State:
        path = self.root / "state.json"
        try:
            return _State.from_json(json.loads(path.read_text(encoding="utf-8")))
        except FileNotFoundError:
            return _State()
        except (OSError, ValueError, TypeError, KeyError) as exc:
            log.warning("%s: unreadable (%s); starting a new activation history", path, exc)
            return _State()

    def _write_state(self, state: _State) -> None:
        write_file_atomically(self.root / "state.json", json.dumps(state.to_json(), sort_keys=True).encode())


@dataclass
class _State:
    """state.json: activation history (oldest first) and the replay high-water marks."""

    history: list[int] = field(default_factory=list)
    highest: int | None = None
    newest_created_at: datetime | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> _State:
        newest = data.get("newest_created_at")
        highest = data.get("highest")
        history = data.get("history", [])
        if not isinstance(history, list) or not all(type(v) is int for v in history):
            raise ValueError(f"expected history as a list of versions, got {history!r}")
        if highest is not None and type(highest) is not int:
            raise ValueError(f"expected highest as a version, got {highest!r}")
        return cls(history, highest, datetime.fromisoformat(newest) if newest is not None else None)

    def to_json(self) -> dict[str, Any]:
        newest = self.newest_created_at.isoformat() if self.newest_created_at else None
        return {"history": self.history, "highest": self.highest, "newest_created_at": newest}
