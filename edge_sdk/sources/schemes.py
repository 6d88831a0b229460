"""Every URI scheme a source can have, declared once: its names, the options model it takes and the
factory that makes its source. The lookup by name, the list of names, the options a pipeline file is
validated against and the JSON Schema of `options:` all come from `SCHEMES`."""

from __future__ import annotations

import functools
import operator
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from edge_sdk.core.errors import SourceConfigError
from edge_sdk.core.status import StatusCallback

from .base import Source
from .gstreamer import GStreamerSource, nvargus_pipeline
from .image_folder import ImageFolderSource
from .options import CsiOptions, RtspOptions, SourceOptions, SyntheticOptions, V4L2Options
from .rtsp import RtspSource, camera_url
from .synthetic import PanZoomSource
from .v4l2 import V4L2Source
from .video_file import VideoFileSource

if TYPE_CHECKING:
    from typing import TypeAlias

    from .spec import SourceSpec

OptionsT = TypeVar("OptionsT", bound="SourceOptions | None")


@dataclass(frozen=True)
class SourceScheme(Generic[OptionsT]):
    names: tuple[str, ...]
    """The schemes (`rtsp`, `rtsps`) written before `://`."""
    options: type[OptionsT] | None
    """The options it takes, in the URI query or under `options:`; None when it takes none."""
    make: Callable[[SourceSpec, str, OptionsT, Path, StatusCallback], Source]
    """(spec, location, validated options, base_dir, on_status) -> a source, not yet opened."""
    device_query: bool = False
    """The URI's query also carries the device's own parameters: keys that are not options are left
    in the URL for it instead of being refused (an RTSP camera's `channel=1`)."""


def _local_path(location: str, base_dir: Path) -> Path:
    try:
        path = Path(location).expanduser()
    except RuntimeError as error:  # ~user of a user this host does not have
        raise SourceConfigError(f"source path {location}: {error}") from None
    return path if path.is_absolute() else Path(os.path.normpath(base_dir / path))


def _video_file(spec: SourceSpec, location: str, options: None, base_dir: Path, on_status: StatusCallback) -> Source:
    path = _local_path(location, base_dir)
    return VideoFileSource(path, name=spec.name, loop=spec.loop, on_error=spec.on_error, on_status=on_status)


def _image_folder(spec: SourceSpec, location: str, options: None, base_dir: Path, on_status: StatusCallback) -> Source:
    path = _local_path(location, base_dir)
    return ImageFolderSource(path, name=spec.name, loop=spec.loop, on_error=spec.on_error, on_status=on_status)


def _synthetic(
    spec: SourceSpec, location: str, options: SyntheticOptions, base_dir: Path, on_status: StatusCallback
) -> Source:
    return PanZoomSource(
        _local_path(options.image, base_dir) if options.image is not None else None,
        frames=options.frames,
        size=options.frame_size,
        fps=options.fps,
        name=spec.name or "synthetic",
        loop=spec.loop,
        realtime=options.realtime,
    )


def _rtsp(spec: SourceSpec, location: str, options: RtspOptions, base_dir: Path, on_status: StatusCallback) -> Source:
    return RtspSource(
        camera_url(spec.uri, sdk_keys=RtspOptions.model_fields),
        name=spec.name,
        transport=options.transport,
        open_timeout_ms=options.open_timeout_ms,
        read_timeout_ms=options.read_timeout_ms,
    )


def _v4l2(spec: SourceSpec, location: str, options: V4L2Options, base_dir: Path, on_status: StatusCallback) -> Source:
    if not location:
        raise SourceConfigError(f"v4l2 source: expected v4l2:///dev/videoN or a camera index, got {spec.uri}")
    device: str | int = int(location) if location.isdigit() else location
    return V4L2Source(device, name=spec.name, width=options.width, height=options.height, fps=options.fps)


def _csi(spec: SourceSpec, location: str, options: CsiOptions, base_dir: Path, on_status: StatusCallback) -> Source:
    sensor = location.strip("/") or "0"
    if not sensor.isdigit():
        raise SourceConfigError(f"csi source: expected csi://SENSOR_ID (0, 1, ...), got {spec.uri}")
    pipeline = nvargus_pipeline(
        int(sensor), width=options.width, height=options.height, fps=options.fps, flip=options.flip
    )
    return GStreamerSource(pipeline, name=spec.name or f"csi{sensor}", description=f"CSI camera {sensor} ({spec.uri})")


def _gst(spec: SourceSpec, location: str, options: None, base_dir: Path, on_status: StatusCallback) -> Source:
    # The pipeline is everything after gst:// verbatim: caps contain '/', '?' and ','.
    return GStreamerSource(location, name=spec.name)


SCHEMES: tuple[SourceScheme[Any], ...] = (
    SourceScheme(("file",), None, _video_file),
    SourceScheme(("images",), None, _image_folder),
    SourceScheme(("synthetic",), SyntheticOptions, _synthetic),
    SourceScheme(("rtsp", "rtsps"), RtspOptions, _rtsp, device_query=True),
    SourceScheme(("v4l2",), V4L2Options, _v4l2),
    SourceScheme(("csi",), CsiOptions, _csi),
    SourceScheme(("gst",), None, _gst),
)
"""Every scheme a source URI may have (a plain path is `file`, a bare number `v4l2`)."""


def _by_name(schemes: tuple[SourceScheme[Any], ...]) -> dict[str, SourceScheme[Any]]:
    found: dict[str, SourceScheme[Any]] = {}
    for scheme in schemes:
        for name in scheme.names:
            if name in found:
                raise TypeError(f"source scheme '{name}' is declared twice")
            found[name] = scheme
    return found


SCHEMES_BY_NAME: dict[str, SourceScheme[Any]] = _by_name(SCHEMES)
KNOWN_SCHEMES = ", ".join(sorted(SCHEMES_BY_NAME))
"""The scheme names, for messages."""
OPTIONS_MODELS: tuple[type[SourceOptions], ...] = tuple(
    dict.fromkeys(scheme.options for scheme in SCHEMES if scheme.options is not None)
)
"""Each options model once, in the order of `SCHEMES`."""

if TYPE_CHECKING:
    AnySourceOptions: TypeAlias = SourceOptions
else:  # the union pydantic validates and puts in the JSON Schema, built from the table
    AnySourceOptions = functools.reduce(operator.or_, OPTIONS_MODELS)
