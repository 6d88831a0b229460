"""Lazy access to the onnxruntime package, with a clear error when it is missing."""

from __future__ import annotations

from types import ModuleType

from edge_sdk.core.errors import BackendUnavailableError


def import_onnxruntime() -> ModuleType:
    try:
        import onnxruntime
    except ImportError:
        raise BackendUnavailableError(
            "the onnxruntime backend needs the onnxruntime package: pip install 'edge-sdk[cpu]' "
            "(or 'edge-sdk[cuda]' / 'edge-sdk[openvino]' / 'edge-sdk[atlas]' for accelerators)"
        ) from None
    # Fatal only: its warnings (unused initializers) are noise, and its errors also come back as
    # exceptions, which the SDK words as one line; ONNX Runtime's own log would print them twice.
    onnxruntime.set_default_logger_severity(4)
    return onnxruntime
