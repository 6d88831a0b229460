"""Lazy access to OpenCV (Jetson images ship their own build with GStreamer; pip's is optional)."""

from __future__ import annotations

import logging
import os
import re
from types import ModuleType

from edge_sdk.core.errors import BackendUnavailableError

# OpenCV's own log (cv::utils::logging) and FFmpeg's, which OpenCV's FFmpeg backend sets up when it
# first opens a video, are quiet unless the SDK logs at DEBUG (`edge-sdk --debug`); a level the user put
# in the environment wins. FFmpeg's level is av_log's number: -8 is AV_LOG_QUIET. Given any level,
# OpenCV prints FFmpeg's lines to stdout, into a command's output, so --debug leaves it unset and
# FFmpeg prints its errors to stderr as it does without OpenCV's help.
OPENCV_LOG_ENV = "OPENCV_LOG_LEVEL"
FFMPEG_LOG_ENV = "OPENCV_FFMPEG_LOGLEVEL"
_QUIET = {OPENCV_LOG_ENV: "FATAL", FFMPEG_LOG_ENV: "-8"}
_VERBOSE = {OPENCV_LOG_ENV: "WARNING"}


def import_cv2() -> ModuleType:
    chosen = _choose_log_levels()
    try:
        import cv2
    except ImportError:
        raise BackendUnavailableError(
            "video and image I/O needs OpenCV: pip install 'edge-sdk[opencv]' "
            "(on Jetson, use the OpenCV that JetPack ships)"
        ) from None
    if chosen is not None:
        _set_opencv_log_level(cv2, chosen)
    return cv2


def _choose_log_levels() -> str | None:
    """Put the levels into the environment, where OpenCV reads them and the pipeline's stage processes
    inherit them; the OpenCV level chosen, or None when the environment already says (the user's
    setting, or this choice made by the process that started this one).

    A damaged frame or a missing index makes FFmpeg print a raw line per packet
    ("[mpeg4 @ 0x...] ac-tex damaged"), beside the one line the SDK words for it.
    """
    if OPENCV_LOG_ENV in os.environ or FFMPEG_LOG_ENV in os.environ:
        return None
    levels = _VERBOSE if logging.getLogger("edge_sdk").isEnabledFor(logging.DEBUG) else _QUIET
    os.environ.update(levels)
    return levels[OPENCV_LOG_ENV]


def _set_opencv_log_level(cv2: ModuleType, level: str) -> None:
    """OpenCV reads its variable when it first logs; set it as well, for a cv2 imported earlier."""
    logging_module = getattr(getattr(cv2, "utils", None), "logging", None)
    setter = getattr(logging_module, "setLogLevel", None) or getattr(cv2, "setLogLevel", None)
    value = getattr(logging_module or cv2, f"LOG_LEVEL_{level.upper()}", None)
    if setter is not None and value is not None:
        setter(value)


def has_gstreamer(cv2: ModuleType) -> bool:
    """Whether this OpenCV was built with GStreamer (JetPack's is; pip's wheels are not)."""
    return re.search(r"^\s*GStreamer:\s*YES", cv2.getBuildInformation(), re.MULTILINE) is not None


def timeout_params(cv2: ModuleType, open_timeout_ms: int | None, read_timeout_ms: int | None) -> list[int]:
    """VideoCapture open parameters for the timeouts this OpenCV knows.

    OpenCV 4.5.2+ and 5.x name them CAP_PROP_OPEN_TIMEOUT_MSEC / CAP_PROP_READ_TIMEOUT_MSEC; older
    builds (e.g. JetPack 4's OpenCV 4.1) have neither, and then the backend's own defaults apply.
    """
    params: list[int] = []
    for name, value in (
        ("CAP_PROP_OPEN_TIMEOUT_MSEC", open_timeout_ms),
        ("CAP_PROP_READ_TIMEOUT_MSEC", read_timeout_ms),
    ):
        prop = getattr(cv2, name, None)
        if prop is not None and value is not None:
            params += [int(prop), int(value)]
    return params
