"""Lazy access to the onnxruntime package, with a clear error when it is missing."""

from __future__ import annotations

from types import ModuleType

from edge_sdk.errors import BackendUnavailableError


def import_onnxruntime() -> ModuleType:
    try:
        import onnxruntime
    except ImportError:
        raise BackendUnavailableError(
            "the onnxruntime backend needs the onnxruntime package: pip install 'edge-sdk[cpu]' "
            "(or 'edge-sdk[cuda]' / 'edge-sdk[openvino]' / 'edge-sdk[atlas]' for accelerators)"
        ) from None
    onnxruntime.set_default_logger_severity(3)  # errors only; warnings about unused initializers are noise
    return onnxruntime
