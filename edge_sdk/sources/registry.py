"""Sources chosen by URI scheme."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from edge_sdk.errors import ConfigError

from .base import Source
from .image_folder import ImageFolderSource
from .spec import SourceSpec
from .synthetic import PanZoomSource
from .video_file import VideoFileSource

SourceFactory = Callable[[SourceSpec, str, dict[str, str], Path], Source]


def _local_path(location: str, base_dir: Path) -> Path:
    path = Path(location).expanduser()
    return path if path.is_absolute() else Path(os.path.normpath(base_dir / path))


def _video_file(spec: SourceSpec, location: str, query: dict[str, str], base_dir: Path) -> Source:
    return VideoFileSource(_local_path(location, base_dir), name=spec.name, loop=spec.loop)


def _image_folder(spec: SourceSpec, location: str, query: dict[str, str], base_dir: Path) -> Source:
    return ImageFolderSource(_local_path(location, base_dir), name=spec.name, loop=spec.loop)


def _synthetic(spec: SourceSpec, location: str, query: dict[str, str], base_dir: Path) -> Source:
    unknown = set(query) - {"image", "frames", "size", "fps", "realtime"}
    if unknown:
        raise ConfigError(f"synthetic source: unknown parameters {sorted(unknown)} in {spec.uri}")
    try:
        width, height = (int(v) for v in query.get("size", "640x480").lower().split("x"))
        frames = int(query.get("frames", "300"))
        fps = float(query.get("fps", "30"))
    except ValueError:
        raise ConfigError(f"synthetic source: expected size=WxH, frames=N, fps=F in {spec.uri}") from None
    if width < 1 or height < 1 or frames < 1 or fps <= 0:
        raise ConfigError(f"synthetic source: expected size=WxH with W, H >= 1, frames >= 1, fps > 0 in {spec.uri}")
    image = _local_path(query["image"], base_dir) if "image" in query else None
    return PanZoomSource(
        image,
        frames=frames,
        size=(width, height),
        fps=fps,
        name=spec.name or "synthetic",
        loop=spec.loop,
        realtime=query.get("realtime", "false").lower() in ("1", "true", "yes"),
    )


SOURCES: dict[str, SourceFactory] = {
    "file": _video_file,
    "images": _image_folder,
    "synthetic": _synthetic,
}


def create_source(spec: SourceSpec, base_dir: Path) -> Source:
    """A (not yet opened) source for `spec`; relative paths are taken from `base_dir`."""
    parts = urlsplit(spec.uri)
    scheme = parts.scheme or "file"
    if len(scheme) == 1:  # a Windows drive letter, not a scheme
        scheme = "file"
    if scheme not in SOURCES:
        raise ConfigError(f"unknown source scheme '{scheme}://' in {spec.uri}; known: {', '.join(sorted(SOURCES))}")
    location = spec.uri if not parts.scheme else (parts.netloc + parts.path)
    query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
    return SOURCES[scheme](spec, location, query, base_dir)
