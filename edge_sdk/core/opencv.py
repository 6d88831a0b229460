"""Lazy access to OpenCV (Jetson images ship their own build with GStreamer; pip's is optional)."""

from __future__ import annotations

import re
from types import ModuleType

from edge_sdk.core.errors import BackendUnavailableError


def import_cv2() -> ModuleType:
    try:
        import cv2
    except ImportError:
        raise BackendUnavailableError(
            "video and image I/O needs OpenCV: pip install 'edge-sdk[opencv]' "
            "(on Jetson, use the OpenCV that JetPack ships)"
        ) from None
    return cv2


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
