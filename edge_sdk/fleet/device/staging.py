"""Writing one deployment into the store: a private staging folder, each artifact streamed in and verified.

Nothing here is visible to readers of the store until `Staging.commit` renames the folder into
`versions/<version>`; even then `current` does not move (that is `ArtifactStore.activate`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from edge_sdk.core.errors import ArtifactError, ArtifactHashError
from edge_sdk.fleet.wire.artifact_files import BLOCK_SIZE, checked_name, sha256_file
from edge_sdk.fleet.wire.manifest import Artifact, DeploymentManifest


class ArtifactWriter:
    """Streams one artifact into a staging folder, hashing as it goes; verified and renamed on close."""

    def __init__(self, folder: Path, artifact: Artifact, on_done: Callable[[str], None] | None = None):
        self.artifact = artifact
        self._on_done = on_done
        self._final = folder / artifact.name
        self._temp = folder / f".{artifact.name}.{secrets.token_hex(4)}.part"
        fd = os.open(self._temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        self._file: BinaryIO = os.fdopen(fd, "wb")
        self._digest = hashlib.sha256()
        self._size = 0

    def write(self, data: bytes) -> None:
        if self._size + len(data) > self.artifact.size:
            self.discard()
            raise ArtifactHashError(
                f"artifact '{self.artifact.name}': expected {self.artifact.size} bytes, got more than that"
            )
        self._file.write(data)
        self._digest.update(data)
        self._size += len(data)

    def close(self) -> Path:
        """Check size and SHA-256, then move the file into place; a mismatch deletes it."""
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        got = self._digest.hexdigest()
        if self._size != self.artifact.size or got != self.artifact.sha256:
            self._temp.unlink(missing_ok=True)
            raise ArtifactHashError(
                f"artifact '{self.artifact.name}': expected {self.artifact.size} bytes with sha256 "
                f"{self.artifact.sha256}, got {self._size} bytes with sha256 {got}"
            )
        os.replace(self._temp, self._final)
        if self._on_done is not None:
            self._on_done(self.artifact.name)
        return self._final

    def discard(self) -> None:
        if not self._file.closed:
            self._file.close()
        self._temp.unlink(missing_ok=True)

    def __enter__(self) -> ArtifactWriter:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if kind is None:
            self.close()
        else:
            self.discard()


class Staging:
    """One deployment being written. `commit` makes it a version on disk; it does not activate it."""

    def __init__(
        self, manifest: DeploymentManifest, signed: bytes | None, folder: Path, install: Callable[[Path, int], None]
    ):
        self._install = install
        self.manifest = manifest
        self._signed = signed
        self.folder = folder
        self._artifacts = folder / "artifacts"
        self._written: set[str] = set()
        self._done = False

    @property
    def missing(self) -> list[str]:
        """Artifacts not written yet, in manifest order."""
        return [a.name for a in self.manifest.artifacts if a.name not in self._written]

    def _artifact(self, name: str) -> Artifact:
        checked_name(name)
        if self._done:
            raise ArtifactError(f"staging of version {self.manifest.version} is already finished")
        try:
            return self.manifest.artifact(name)
        except KeyError:
            names = [a.name for a in self.manifest.artifacts]
            raise ArtifactError(
                f"artifact '{name}' is not in the manifest; expected one of {', '.join(names)}"
            ) from None

    def writer(self, name: str) -> ArtifactWriter:
        """A writer for streaming an artifact in (e.g. a download); verified when it closes."""
        return ArtifactWriter(self._artifacts, self._artifact(name), on_done=self._written.add)

    def add_bytes(self, name: str, data: bytes) -> Path:
        with self.writer(name) as writer:
            writer.write(data)
        return self._artifacts / name

    def add_file(self, name: str, source: Path, move: bool = False) -> Path:
        """Copy (or move, e.g. an assembled chunk transfer) a file in, verifying size and SHA-256 first."""
        artifact = self._artifact(name)
        try:
            if move:
                got, size = sha256_file(source)
                if size != artifact.size or got != artifact.sha256:
                    raise ArtifactHashError(
                        f"artifact '{name}' from {source}: expected {artifact.size} bytes with sha256 "
                        f"{artifact.sha256}, got {size} bytes with sha256 {got}"
                    )
                with contextlib.suppress(OSError):  # another filesystem: fall back to copying
                    os.replace(source, self._artifacts / name)
                    self._written.add(name)
                    return self._artifacts / name
            with self.writer(name) as writer, open(source, "rb") as file:
                while block := file.read(BLOCK_SIZE):
                    writer.write(block)
        except OSError as exc:
            raise ArtifactError(f"artifact '{name}': cannot read {source} ({exc.strerror})") from None
        return self._artifacts / name

    def commit(self) -> int:
        """Make the staged files version `manifest.version` on disk (current is not touched)."""
        if self.missing:
            raise ArtifactError(
                f"version {self.manifest.version}: artifacts not written yet: {', '.join(self.missing)}"
            )
        write_file_atomically(self.folder / "manifest.json", self.manifest.canonical_json())
        if self._signed is not None:
            write_file_atomically(self.folder / "manifest.signed", self._signed)
        fsync_dir(self._artifacts)
        self._install(self.folder, self.manifest.version)
        self._done = True
        return self.manifest.version

    def abort(self) -> None:
        """Throw the staged files away."""
        self._done = True
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> Staging:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if not self._done or kind is not None:
            self.abort()


def write_file_atomically(path: Path, data: bytes) -> None:
    """Write via a temp file and rename, so readers see the old or the new content, never half."""
    temp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    with open(temp, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temp, path)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
