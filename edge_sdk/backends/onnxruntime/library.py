"""Lazy access to the onnxruntime package, with a clear error when it is missing."""

from __future__ import annotations

import logging
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
    # With the SDK logging at DEBUG (`edge-sdk --debug`) its warnings and errors show as well.
    debug = logging.getLogger("edge_sdk").isEnabledFor(logging.DEBUG)
    onnxruntime.set_default_logger_severity(WARNING_SEVERITY if debug else FATAL_SEVERITY)
    return onnxruntime


WARNING_SEVERITY, FATAL_SEVERITY = 2, 4
"""ONNX Runtime's logger severities (0 verbose, 1 info, 2 warning, 3 error, 4 fatal)."""
