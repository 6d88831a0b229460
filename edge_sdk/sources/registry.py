"""Sources chosen by URI scheme."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from edge_sdk.core.errors import SourceConfigError
from edge_sdk.core.status import StatusCallback, ignore_status

from .base import Source
from .frame_limit import FrameLimit
from .gstreamer import GStreamerSource, nvargus_pipeline
from .image_folder import ImageFolderSource
from .reconnecting import ReconnectingSource, StopSignal
from .rtsp import rtsp_source_from_uri
from .spec import SourceSpec
from .synthetic import PanZoomSource
from .v4l2 import V4L2Source
from .video_file import VideoFileSource

SourceFactory = Callable[[SourceSpec, str, dict[str, str], Path, StatusCallback], Source]
"""(spec, location, query, base_dir, on_status) -> a source, not yet opened."""


def _local_path(location: str, base_dir: Path) -> Path:
    try:
        path = Path(location).expanduser()
    except RuntimeError as error:  # ~user of a user this host does not have
        raise SourceConfigError(f"source path {location}: {error}") from None
    return path if path.is_absolute() else Path(os.path.normpath(base_dir / path))


def _video_file(
    spec: SourceSpec, location: str, query: dict[str, str], base_dir: Path, on_status: StatusCallback
) -> Source:
    path = _local_path(location, base_dir)
    return VideoFileSource(path, name=spec.name, loop=spec.loop, on_error=spec.on_error, on_status=on_status)


def _image_folder(
    spec: SourceSpec, location: str, query: dict[str, str], base_dir: Path, on_status: StatusCallback
) -> Source:
    path = _local_path(location, base_dir)
    return ImageFolderSource(path, name=spec.name, loop=spec.loop, on_error=spec.on_error, on_status=on_status)


def _synthetic(
    spec: SourceSpec, location: str, query: dict[str, str], base_dir: Path, on_status: StatusCallback
) -> Source:
    unknown = set(query) - {"image", "frames", "size", "fps", "realtime"}
    if unknown:
        raise SourceConfigError(f"synthetic source: unknown parameters {sorted(unknown)} in {spec.uri}")
    try:
        width, height = (int(v) for v in query.get("size", "640x480").lower().split("x"))
        frames = int(query.get("frames", "300"))
        fps = float(query.get("fps", "30"))
    except ValueError:
        raise SourceConfigError(f"synthetic source: expected size=WxH, frames=N, fps=F in {spec.uri}") from None
    if width < 1 or height < 1 or frames < 1 or fps <= 0:
        raise SourceConfigError(
            f"synthetic source: expected size=WxH with W, H >= 1, frames >= 1, fps > 0 in {spec.uri}"
        )
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


def _rtsp(spec: SourceSpec, location: str, query: dict[str, str], base_dir: Path, on_status: StatusCallback) -> Source:
    return rtsp_source_from_uri(spec.uri, spec.name)


def _v4l2(spec: SourceSpec, location: str, query: dict[str, str], base_dir: Path, on_status: StatusCallback) -> Source:
    unknown = set(query) - {"width", "height", "fps"}
    if unknown:
        raise SourceConfigError(f"v4l2 source: unknown parameters {sorted(unknown)} in {spec.uri}")
    if not location:
        raise SourceConfigError(f"v4l2 source: expected v4l2:///dev/videoN or a camera index, got {spec.uri}")
    device: str | int = int(location) if location.isdigit() else location
    width, height = _positive_int(query, "width", spec.uri), _positive_int(query, "height", spec.uri)
    fps = _positive_float(query, "fps", spec.uri)
    return V4L2Source(device, name=spec.name, width=width, height=height, fps=fps)


def _csi(spec: SourceSpec, location: str, query: dict[str, str], base_dir: Path, on_status: StatusCallback) -> Source:
    unknown = set(query) - {"width", "height", "fps", "flip"}
    if unknown:
        raise SourceConfigError(f"csi source: unknown parameters {sorted(unknown)} in {spec.uri}")
    sensor = location.strip("/") or "0"
    if not sensor.isdigit():
        raise SourceConfigError(f"csi source: expected csi://SENSOR_ID (0, 1, ...), got {spec.uri}")
    pipeline = nvargus_pipeline(
        int(sensor),
        width=_positive_int(query, "width", spec.uri) or 1920,
        height=_positive_int(query, "height", spec.uri) or 1080,
        fps=_positive_float(query, "fps", spec.uri) or 30.0,
        flip=_whole_number(query, "flip", spec.uri, default=0),
    )
    return GStreamerSource(pipeline, name=spec.name or f"csi{sensor}", description=f"CSI camera {sensor} ({spec.uri})")


def _gst(spec: SourceSpec, location: str, query: dict[str, str], base_dir: Path, on_status: StatusCallback) -> Source:
    # The pipeline is everything after gst:// verbatim: caps contain '/', '?' and ','.
    return GStreamerSource(spec.uri.split("://", 1)[1], name=spec.name)


def _whole_number(query: dict[str, str], key: str, uri: str, default: int) -> int:
    if key not in query:
        return default
    if not query[key].isdigit():
        raise SourceConfigError(f"expected {key}=N with a whole number N >= 0, got '{query[key]}' in {uri}")
    return int(query[key])


def _positive_int(query: dict[str, str], key: str, uri: str) -> int | None:
    if key not in query:
        return None
    if not query[key].isdigit() or int(query[key]) < 1:
        raise SourceConfigError(f"expected {key}=N with a whole number N >= 1, got '{query[key]}' in {uri}")
    return int(query[key])


def _positive_float(query: dict[str, str], key: str, uri: str) -> float | None:
    if key not in query:
        return None
    try:
        value = float(query[key])
    except ValueError:
        value = 0.0
    if not value > 0:
        raise SourceConfigError(f"expected {key}=F with a number F > 0, got '{query[key]}' in {uri}")
    return value


SOURCES: dict[str, SourceFactory] = {
    "file": _video_file,
    "images": _image_folder,
    "synthetic": _synthetic,
    "rtsp": _rtsp,
    "rtsps": _rtsp,
    "v4l2": _v4l2,
    "csi": _csi,
    "gst": _gst,
}


def create_source(
    spec: SourceSpec,
    base_dir: Path,
    on_status: StatusCallback = ignore_status,
    stop: StopSignal | None = None,
) -> Source:
    """A (not yet opened) source for `spec`; relative paths are taken from `base_dir`.

    Live sources (`is_live`) come back wrapped in a ReconnectingSource that follows `spec.reconnect`,
    reports through `on_status` and stops waiting when `stop` is set; `spec.max_frames` ends the
    source after that many frames. Files and folders follow `spec.on_error` for frames they cannot
    decode and report skips through `on_status`. A bare number is a camera index.

    A URI or parameters that are malformed raise SourceConfigError (a ConfigError and a
    PermanentSourceError) here; open() raises SourceError with `retryable` set by cause.
    """
    scheme, location, query = _split_uri(spec.uri)
    if scheme not in SOURCES:
        raise SourceConfigError(
            f"unknown source scheme '{scheme}://' in {spec.uri}; known: {', '.join(sorted(SOURCES))}"
        )
    source = SOURCES[scheme](spec, location, query, base_dir, on_status)
    if source.is_live:
        source = ReconnectingSource(source, spec.reconnect.policy(), on_status=on_status, stop=stop)
    return FrameLimit(source, spec.max_frames) if spec.max_frames is not None else source


def _split_uri(uri: str) -> tuple[str, str, dict[str, str]]:
    """(scheme, location, query parameters); a plain path is `file`, a bare number a v4l2 camera index."""
    if uri.startswith("gst://"):  # a pipeline, not a URL: caps hold '/', '?' and '[' freely
        return "gst", uri[len("gst://") :], {}
    if uri.strip().isdigit():
        return "v4l2", uri.strip(), {}
    try:
        parts = urlsplit(uri)
    except ValueError as error:
        raise SourceConfigError(f"source uri: cannot parse {uri}: {error}") from None
    scheme = parts.scheme or "file"
    if len(scheme) == 1:  # a Windows drive letter, not a scheme
        scheme = "file"
    location = uri if not parts.scheme else (parts.netloc + parts.path)
    query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
    return scheme, location, query
