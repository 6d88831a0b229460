"""Fixtures for live sources: a private RTSP server on 127.0.0.1 publishing a looping video."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .rtsp_server import RtspServer, find_ffmpeg, find_server_binary


@pytest.fixture
def rtsp_server(small_video: Path, tmp_path: Path) -> Iterator[RtspServer]:
    """A running rtsp-server-perl with ffmpeg publishing `small_video` in a loop at /cam; stopped after."""
    binary = find_server_binary()
    if binary is None:
        pytest.skip("needs Debian's rtsp-server-perl (make system-deps, or apt-get install rtsp-server-perl)")
    ffmpeg = find_ffmpeg()
    if ffmpeg is None:
        pytest.skip("needs the ffmpeg binary from imageio-ffmpeg (pip install -e '.[test]')")
    log_dir = tmp_path / "rtsp-logs"
    log_dir.mkdir()
    server = RtspServer(binary, ffmpeg, small_video, log_dir)
    server.start()
    try:
        yield server
    finally:
        server.stop()
