"""TensorRT's timing cache, kept per device and TensorRT version, so a rebuild skips the kernel timing
it already did (the longest part of a build). One file per target, written atomically."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

TIMING_DIR_ENV = "EDGE_SDK_TENSORRT_TIMING_DIR"


def default_timing_dir() -> Path:
    """`$EDGE_SDK_TENSORRT_TIMING_DIR`, else `$XDG_CACHE_HOME/edge-sdk/tensorrt-timing`."""
    if os.environ.get(TIMING_DIR_ENV):
        return Path(os.environ[TIMING_DIR_ENV])
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "edge-sdk" / "tensorrt-timing"


def timing_cache_path(
    directory: Path, tensorrt_version: str, gpu: str, compute_capability: str, dla_core: int | None
) -> Path:
    target = f"{gpu}-sm{compute_capability}" + (f"-dla{dla_core}" if dla_core is not None else "")
    slug = re.sub(r"[^A-Za-z0-9.]+", "_", f"trt{tensorrt_version}-{target}").strip("_")
    return directory / f"{slug}.cache"


def read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
