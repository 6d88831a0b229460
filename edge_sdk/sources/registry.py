"""Sources chosen by URI scheme: the scheme's declaration (schemes.py) makes the source; live ones
reconnect, and max_frames ends any."""

from __future__ import annotations

from pathlib import Path

from edge_sdk.core.errors import SourceConfigError
from edge_sdk.core.status import StatusCallback, ignore_status

from .base import Source
from .frame_limit import FrameLimit
from .reconnecting import ReconnectingSource, StopSignal
from .schemes import KNOWN_SCHEMES, SCHEMES_BY_NAME
from .spec import SourceSpec
from .uri import split_source_uri


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

    The scheme and its options were checked when `spec` was made; a location that is malformed
    (a camera path, a sensor id, an RTSP host or port) raises SourceConfigError (a ConfigError and a
    PermanentSourceError) here; open() raises SourceError with `retryable` set by cause.
    """
    parts = split_source_uri(spec.uri)
    scheme = SCHEMES_BY_NAME.get(parts.scheme)
    if scheme is None:  # only a spec made without validation (model_construct) gets here
        raise SourceConfigError(f"unknown source scheme '{parts.scheme}://' in {spec.uri}; known: {KNOWN_SCHEMES}")
    source = scheme.make(spec, parts.location, spec.options, base_dir, on_status)
    if source.is_live:
        source = ReconnectingSource(source, spec.reconnect.policy(), on_status=on_status, stop=stop)
    return FrameLimit(source, spec.max_frames) if spec.max_frames is not None else source
