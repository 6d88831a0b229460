"""Helpers shared by engine tests. Kept light (no numpy/onnx imports) because spawned processes import it."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

from edge_sdk.engines.cache import EngineCache, EngineKey


def snapshot(root: Path) -> dict[str, str]:
    """Every file below `root` (relative path -> sha256), to prove a directory was left untouched."""
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def slow_build(counter: Path, out_dir: Path) -> dict[str, Any]:
    """A build that takes a while, writes an artifact and records that it ran in `counter` (outside the cache)."""
    time.sleep(0.5)
    (out_dir / "engine.bin").write_bytes(b"engine built once")
    with counter.open("a") as handle:
        handle.write(f"built in {out_dir.name}\n")
    return {"builder": "slow_build"}


def race_to_build(root: str, key_fields: dict[str, Any], counter: str, barrier: Any, results: Any) -> None:
    """Process target: wait for the other racers, then get_or_build the same key in a fresh EngineCache."""
    from functools import partial

    barrier.wait(timeout=60)
    entry, built = EngineCache(Path(root)).get_or_build(EngineKey(**key_fields), partial(slow_build, Path(counter)))
    results.put((str(entry.directory), built))


def every_path(root: Path) -> dict[str, str]:
    """Every path below `root`, hidden ones included (relative path -> sha256, "folder" or "link to ..."), to
    prove a directory is byte for byte and entry for entry as it was."""
    tree = {}
    for path in sorted(root.rglob("*")):
        name = str(path.relative_to(root))
        if path.is_symlink():
            tree[name] = f"link to {path.readlink()}"
        elif path.is_dir():
            tree[name] = "folder"
        else:
            tree[name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return tree


def keys_sharing_a_prefix(key: EngineKey, chars: int) -> tuple[EngineKey, EngineKey]:
    """Two variants of `key` whose digests start with the same `chars` hex characters (found by trying)."""
    from dataclasses import replace

    seen: dict[str, EngineKey] = {}
    for n in range(1_000_000):
        candidate = replace(key, model_sha256=f"{n:064x}")
        prefix = candidate.digest()[:chars]
        if prefix in seen:
            return seen[prefix], candidate
        seen[prefix] = candidate
    raise AssertionError(f"no two digests share {chars} characters")
