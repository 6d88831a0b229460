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
