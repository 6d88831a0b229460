"""Lazy access to OpenCV (Jetson images ship their own build with GStreamer; pip's is optional)."""

from __future__ import annotations

from types import ModuleType

from edge_sdk.errors import BackendUnavailableError


def import_cv2() -> ModuleType:
    try:
        import cv2
    except ImportError:
        raise BackendUnavailableError(
            "video and image I/O needs OpenCV: pip install 'edge-sdk[opencv]' "
            "(on Jetson, use the OpenCV that JetPack ships)"
        ) from None
    return cv2
