"""Artifact files as both sides of a deployment name and check them: safe names, SHA-256 and size."""

from __future__ import annotations

import hashlib
from pathlib import Path

from edge_sdk.core.errors import ArtifactPathError
from edge_sdk.fleet.wire.manifest import safe_artifact_name

BLOCK_SIZE = 1 << 20
"""Bytes read at a time when hashing or copying an artifact."""


def sha256_file(path: Path) -> tuple[str, int]:
    """SHA-256 (hex) and size of a file, read in blocks."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as file:
        while block := file.read(BLOCK_SIZE):
            digest.update(block)
            size += len(block)
    return digest.hexdigest(), size


def checked_name(name: str) -> str:
    """`name` if it is a safe artifact file name, else ArtifactPathError."""
    try:
        return safe_artifact_name(name)
    except ValueError as exc:
        raise ArtifactPathError(f"artifact name {name!r:.140} refused: {exc}") from None
