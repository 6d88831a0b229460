"""Engine cache: one directory per key, a manifest beside the artifact, atomic writes, one builder per key."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock

from edge_sdk.errors import EngineCacheError

log = logging.getLogger(__name__)

CACHE_DIR_ENV = "EDGE_SDK_CACHE_DIR"
MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1


def default_cache_dir() -> Path:
    """`$EDGE_SDK_CACHE_DIR`, else `$XDG_CACHE_HOME/edge-sdk/engines` (~/.cache/edge-sdk/engines)."""
    if os.environ.get(CACHE_DIR_ENV):
        return Path(os.environ[CACHE_DIR_ENV])
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "edge-sdk" / "engines"


@dataclass(frozen=True)
class EngineKey:
    """Everything that makes a built engine invalid when it changes."""

    model_sha256: str
    profile_name: str
    profile_sha256: str
    backend: str
    backend_version: str
    device_identity: str
    precision: str
    input_shapes: str
    graph_sha256: str | None = None
    calibration_sha256: str | None = None

    def digest(self) -> str:
        canonical = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(canonical.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class CacheEntry:
    directory: Path
    manifest: dict[str, Any]

    @property
    def digest(self) -> str:
        return self.directory.name

    @property
    def key(self) -> dict[str, Any]:
        return dict(self.manifest.get("key", {}))


@dataclass(frozen=True)
class EntryReport:
    """Outcome of checking one entry: `problem` is None for a healthy entry."""

    digest: str
    directory: Path
    manifest: dict[str, Any]
    problem: str | None


Build = Callable[[Path], dict[str, Any]]
"""Writes the artifact files into the given directory and returns build facts."""


class EngineCache:
    def __init__(self, root: Path | None = None):
        self.root = root or default_cache_dir()

    def get_or_build(self, key: EngineKey, build: Build) -> tuple[CacheEntry, bool]:
        """The entry for `key`, building it first when it is absent or corrupt. Returns (entry, built)."""
        digest = key.digest()
        entry = self._healthy(digest, warn=False)
        if entry:
            return entry, False
        self._ensure_writable()
        with FileLock(str(self.root / f".{digest}.lock")):
            entry = self._healthy(digest, warn=True)  # another process may have built it while we waited
            if entry:
                return entry, False
            return self._build(key, digest, build), True

    def entries(self) -> list[EntryReport]:
        if not self.root.is_dir():
            return []
        return [
            self._check(path) for path in sorted(self.root.iterdir()) if path.is_dir() and not path.name.startswith(".")
        ]

    def remove(self, digest_prefix: str | None = None) -> list[str]:
        """Remove entries whose digest starts with the prefix (all entries when None)."""
        removed = []
        for report in self.entries():
            if digest_prefix is None or report.digest.startswith(digest_prefix):
                shutil.rmtree(report.directory)
                removed.append(report.digest)
        return removed

    def _healthy(self, digest: str, warn: bool) -> CacheEntry | None:
        directory = self.root / digest
        if not directory.exists():
            return None
        report = self._check(directory)
        if report.problem is None:
            return CacheEntry(directory, report.manifest)
        if warn:
            log.warning("engine cache entry %s is unusable (%s); rebuilding", digest, report.problem)
        return None

    def _check(self, directory: Path) -> EntryReport:
        try:
            manifest = json.loads((directory / MANIFEST).read_text())
            files: dict[str, str] = manifest["files"]
            if not isinstance(files, dict):
                raise TypeError("files is not a mapping")
        except FileNotFoundError:
            return EntryReport(directory.name, directory, {}, "manifest.json is missing")
        except (OSError, ValueError, KeyError, TypeError):
            return EntryReport(directory.name, directory, {}, "manifest.json is unreadable")
        for name, expected in files.items():
            path = directory / name
            if not path.is_file():
                return EntryReport(directory.name, directory, manifest, f"{name} is missing")
            if _sha256_file(path) != expected:
                return EntryReport(
                    directory.name, directory, manifest, f"{name} does not match its hash (truncated or corrupt)"
                )
        return EntryReport(directory.name, directory, manifest, None)

    def _ensure_writable(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=self.root, prefix=".probe-"):
                pass
        except OSError as exc:
            raise EngineCacheError(
                f"engine cache directory {self.root} is not writable ({exc.strerror or exc}); "
                f"set {CACHE_DIR_ENV} or pass --cache-dir"
            ) from None

    def _build(self, key: EngineKey, digest: str, build: Build) -> CacheEntry:
        for stale in self.root.glob(f".tmp-{digest}-*"):  # left by a builder that died
            shutil.rmtree(stale, ignore_errors=True)
        staging = Path(tempfile.mkdtemp(prefix=f".tmp-{digest}-", dir=self.root))
        try:
            started = time.time()
            facts = build(staging)
            files = {
                str(path.relative_to(staging)): _sha256_file(path)
                for path in sorted(staging.rglob("*"))
                if path.is_file()
            }
            manifest = {
                "format": MANIFEST_FORMAT,
                "digest": digest,
                "key": asdict(key),
                "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
                "build_seconds": round(time.time() - started, 3),
                "facts": facts,
                "files": files,
            }
            (staging / MANIFEST).write_text(json.dumps(manifest, indent=2))
            final = self.root / digest
            if final.exists():  # a corrupt entry: move it aside so the swap below is one rename
                trash = self.root / f".trash-{digest}-{os.getpid()}"
                final.rename(trash)
                shutil.rmtree(trash, ignore_errors=True)
            staging.rename(final)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return CacheEntry(final, manifest)


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
