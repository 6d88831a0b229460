"""Engine cache: one directory per key, a manifest beside the artifact, atomic writes, one builder per key.

The cache deletes only what it made: `remove*` touch a folder only when its manifest is one the SDK
wrote for it (a JSON object with the SDK's keys whose recorded digest is the folder's name), and only
the files that manifest lists. Anything else in the cache directory is reported and left alone.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from contextlib import suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from edge_sdk.core.errors import ConfigError, EngineCacheError

from .cache_lock import KeyLock
from .cache_manifest import MANIFEST, MANIFEST_FORMAT, manifest_problem, read_manifest
from .model_index import ModelIndex

log = logging.getLogger(__name__)

CACHE_DIR_ENV = "EDGE_SDK_CACHE_DIR"
DIGEST_CHARS = 32
MIN_DIGEST_PREFIX = 4
"""The shortest digest prefix `remove` accepts (`cache ls` shows 12 characters)."""

_DIGEST = re.compile(rf"[0-9a-f]{{{DIGEST_CHARS}}}")
_PREFIX = re.compile(rf"[0-9a-f]{{{MIN_DIGEST_PREFIX},{DIGEST_CHARS}}}")
_BUILD_LEFTOVER = re.compile(
    rf"\.(?P<lock>[0-9a-f]{{{DIGEST_CHARS}}})\.lock|\.(?:tmp|trash)-(?P<work>[0-9a-f]{{{DIGEST_CHARS}}})-.+"
)
_PROBE = re.compile(r"\.probe-.+")
MODEL_INDEX = ".models"
"""The folder of the model index (model_index.py) inside the cache folder."""


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
        return hashlib.sha256(canonical.encode()).hexdigest()[:DIGEST_CHARS]


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
    """Outcome of checking one entry (a folder named like a digest): `problem` is None for a healthy entry."""

    digest: str
    directory: Path
    manifest: dict[str, Any]
    problem: str | None

    @property
    def removable(self) -> bool:
        """Whether `remove` may delete it: its manifest is one the SDK wrote for this folder."""
        return manifest_problem(self.manifest, self.digest) is None


@dataclass(frozen=True)
class NotAnEntry:
    """Something in the cache directory that the SDK did not make (or cannot prove it made): left alone."""

    path: Path
    reason: str


@dataclass(frozen=True)
class Removal:
    """What a `remove*` call did."""

    removed: tuple[str, ...] = ()
    """Digests of the entries deleted."""
    left_alone: tuple[NotAnEntry, ...] = ()
    """Things that are not engine entries (or files inside an entry that its manifest does not list)."""
    busy: tuple[str, ...] = ()
    """Digests of entries not deleted because a build of that key holds its lock right now."""
    leftovers: int = 0
    """Lock files and staging folders of failed or killed builds that were cleaned up."""


Build = Callable[[Path], dict[str, Any]]
"""Writes the artifact files into the given directory and returns build facts."""


class EngineCache:
    def __init__(self, root: Path | None = None):
        self.root = root or default_cache_dir()
        self.models = ModelIndex(self.root / MODEL_INDEX)
        """What was read from each model seen, so a cached start does not parse it again."""

    def get_or_build(self, key: EngineKey, build: Build) -> tuple[CacheEntry, bool]:
        """The entry for `key`, building it first when it is absent or corrupt. Returns (entry, built)."""
        digest = key.digest()
        entry = self._healthy(digest, warn=False)
        if entry:
            return entry, False
        self._ensure_writable()
        with KeyLock(self._lock_path(digest)):  # removed on release, whether the build worked or failed
            entry = self._healthy(digest, warn=True)  # another process may have built it while we waited
            if entry:
                return entry, False
            return self._build(key, digest, build), True

    def entries(self) -> list[EntryReport]:
        """Every folder named like an engine digest, checked (foreign folders are in `not_entries`)."""
        return [self._check(path) for path in self._children() if _is_entry_folder(path)]

    def not_entries(self) -> list[NotAnEntry]:
        """What else lies in the cache directory, apart from the SDK's own lock and staging files."""
        return [
            NotAnEntry(path, _why_not_an_entry(path))
            for path in self._children()
            if not _is_entry_folder(path) and not _is_housekeeping(path)
        ]

    def find(self, digest_prefix: str) -> EntryReport:
        """The one entry whose digest starts with `digest_prefix`; ConfigError for an empty, too short,
        non-hex or ambiguous prefix, or one that matches nothing."""
        prefix = digest_prefix.lower()
        if not _PREFIX.fullmatch(prefix):
            raise ConfigError(
                f"expected a digest prefix of {MIN_DIGEST_PREFIX} to {DIGEST_CHARS} hex characters "
                f"(see 'edge-sdk cache ls'), got {digest_prefix!r}"
            )
        matches = [report for report in self.entries() if report.digest.startswith(prefix)]
        if not matches:
            raise ConfigError(f"no cache entry starts with '{prefix}' in {self.root}")
        if len(matches) > 1:
            shown = ", ".join(report.digest[:12] for report in matches[:5])
            raise ConfigError(
                f"'{prefix}' matches {len(matches)} cache entries ({shown}{', ...' if len(matches) > 5 else ''}); "
                "give more characters"
            )
        return matches[0]

    def remove(self, digest_prefix: str) -> Removal:
        """Delete the one entry `find(digest_prefix)` names; refused (ConfigError / EngineCacheError, nothing
        touched) when that is not an entry the SDK wrote or a build of it is running."""
        report = self.find(digest_prefix)
        if not report.removable:
            raise ConfigError(f"{report.directory} is not an engine entry ({report.problem}); left alone")
        removal = self.remove_entries([report], list_foreign=False)
        if removal.busy:
            raise EngineCacheError(
                f"cache entry {report.digest[:12]} is being built by another process; left alone, try when it ends"
            )
        return removal

    def remove_all(self) -> Removal:
        """Delete every entry the SDK wrote; everything else is listed in `left_alone`."""
        return self.remove_entries(self.entries())

    def remove_entries(self, reports: Iterable[EntryReport], *, list_foreign: bool = True) -> Removal:
        """Delete the given entries that the SDK wrote and no build holds, only the files their manifests list,
        then clean the leftovers of failed or killed builds. `list_foreign` adds `not_entries()` to `left_alone`."""
        removed: list[str] = []
        left_alone: list[NotAnEntry] = []
        busy: list[str] = []
        for report in reports:
            if not report.removable:
                left_alone.append(NotAnEntry(report.directory, report.problem or "no manifest written by the SDK"))
                continue
            with KeyLock(self._lock_path(report.digest), wait=False) as held:
                if not held:
                    busy.append(report.digest)
                    continue
                if not report.directory.is_dir():  # removed by someone else meanwhile
                    continue
                fresh = self._check(report.directory)  # under the lock: a rebuild may have replaced it
                if not fresh.removable:
                    left_alone.append(NotAnEntry(fresh.directory, fresh.problem or "no manifest written by the SDK"))
                    continue
                left_alone += _delete_listed_files(fresh)
                removed.append(fresh.digest)
        if list_foreign:
            left_alone += self.not_entries()
        return Removal(tuple(removed), tuple(left_alone), tuple(busy), self.clean_build_leftovers())

    def clean_build_leftovers(self) -> int:
        """Remove the lock files and staging folders that failed or killed builds left, for every key no build
        holds now; returns how many were removed."""
        by_digest: dict[str, list[Path]] = {}
        for path in self._children():
            match = _BUILD_LEFTOVER.fullmatch(path.name)
            if match and not path.is_symlink():
                by_digest.setdefault(match["lock"] or match["work"], []).append(path)
        cleaned = 0
        for digest, paths in by_digest.items():
            lock_path = self._lock_path(digest)
            with KeyLock(lock_path, wait=False) as held:
                if not held:
                    continue  # a build of this key is running: its files are in use
                for path in paths:
                    if path != lock_path:  # the lock file goes when the lock is released
                        _remove_path(path)
                    cleaned += 1
        return cleaned

    def _children(self) -> list[Path]:
        if not self.root.is_dir():
            return []
        return sorted(self.root.iterdir())

    def _lock_path(self, digest: str) -> Path:
        return self.root / f".{digest}.lock"

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
        manifest, problem = read_manifest(directory)
        if problem is not None:
            return EntryReport(directory.name, directory, {}, problem)
        files: dict[str, str] = manifest["files"]
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


def _is_entry_folder(path: Path) -> bool:
    return bool(_DIGEST.fullmatch(path.name)) and not path.is_symlink() and path.is_dir()


def _is_housekeeping(path: Path) -> bool:
    """The SDK's own files beside the entries: build locks, staging and trash folders, the writability
    probe, the model index."""
    return not path.is_symlink() and bool(
        _BUILD_LEFTOVER.fullmatch(path.name) or _PROBE.fullmatch(path.name) or path.name == MODEL_INDEX
    )


def _why_not_an_entry(path: Path) -> str:
    if path.is_symlink():
        return "a symbolic link"
    if path.is_dir():
        return "a folder not named by an engine digest"
    return "a file" if path.is_file() else "not a file or folder"


def _delete_listed_files(report: EntryReport) -> list[NotAnEntry]:
    """Delete the files the entry's manifest lists (the manifest last, so an interrupted removal leaves an entry
    `remove` still recognises), then the folders left empty; whatever else is inside is left and returned."""
    directory = report.directory
    listed = set(report.manifest["files"])
    for parent, folders, files in os.walk(directory):  # never follows symbolic links
        base = Path(parent)
        for name in files + [folder for folder in folders if (base / folder).is_symlink()]:
            path = base / name
            if path.relative_to(directory).as_posix() in listed:
                path.unlink()
    for parent, _, _ in os.walk(directory, topdown=False):
        if Path(parent) != directory:
            with suppress(OSError):  # not empty: holds something the manifest does not list
                os.rmdir(parent)
    (directory / MANIFEST).unlink(missing_ok=True)
    try:
        os.rmdir(directory)
        return []
    except OSError:
        pass
    strays = sorted(path.relative_to(directory).as_posix() for path in directory.rglob("*"))
    shown = ", ".join(strays[:3]) + (", ..." if len(strays) > 3 else "")
    return [NotAnEntry(directory, f"holds files its manifest does not list: {shown}")]


def _remove_path(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
