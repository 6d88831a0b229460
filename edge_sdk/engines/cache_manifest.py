"""What makes a folder of the engine cache an entry the SDK wrote: its manifest.

A manifest is the SDK's when it is a regular file under MANIFEST_MAX_BYTES holding a JSON object
with the SDK's keys, its format, the folder's own digest, and only file names that stay inside
the folder. The cache touches nothing else.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path, PurePosixPath
from typing import Any

MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1
MANIFEST_MAX_BYTES = 1 << 20
_SDK_MANIFEST_KEYS = {"format": int, "digest": str, "key": dict, "built_at": str, "facts": dict, "files": dict}


def manifest_problem(manifest: object, digest: str) -> str | None:
    """Why `manifest` is not one the SDK wrote for the entry folder `digest`; None when it is."""
    if not isinstance(manifest, dict):
        return "manifest.json is unreadable (not a JSON object)"
    for name, kind in _SDK_MANIFEST_KEYS.items():
        if not isinstance(manifest.get(name), kind):
            return f"manifest.json is unreadable (expected '{name}' as a JSON {_JSON_KIND[kind]})"
    if manifest["format"] != MANIFEST_FORMAT:
        return f"manifest.json has format {manifest['format']}, this SDK writes {MANIFEST_FORMAT}"
    if manifest["digest"] != digest:
        return f"manifest.json records digest '{manifest['digest'][:40]}', not the folder's name"
    for name, sha256 in manifest["files"].items():
        if not _is_safe_name(name) or not isinstance(sha256, str):
            return f"manifest.json is unreadable (a file entry {name[:40]!r} is not a name and a sha256)"
    return None


_JSON_KIND = {int: "number", str: "string", dict: "object"}


def read_manifest(directory: Path) -> tuple[dict[str, Any], str | None]:
    path = directory / MANIFEST
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return {}, "manifest.json is missing"
    except OSError:
        return {}, "manifest.json is unreadable"
    with os.fdopen(fd, "rb") as handle:
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return {}, "manifest.json is unreadable (not a regular file)"
            data = handle.read(MANIFEST_MAX_BYTES + 1)
        except OSError:
            return {}, "manifest.json is unreadable"
    if len(data) > MANIFEST_MAX_BYTES:
        return {}, f"manifest.json is unreadable (over {MANIFEST_MAX_BYTES} bytes)"
    try:
        manifest = json.loads(data)
    except (ValueError, RecursionError):
        return {}, "manifest.json is unreadable"
    problem = manifest_problem(manifest, directory.name)
    return (manifest, None) if problem is None else ({}, problem)


def _is_safe_name(name: str) -> bool:
    """A path relative to the entry folder that stays inside it."""
    parts = PurePosixPath(name).parts
    return bool(name) and "\\" not in name and not name.startswith("/") and ".." not in parts and name != MANIFEST
