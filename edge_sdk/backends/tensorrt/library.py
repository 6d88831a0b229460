"""Lazy access to the tensorrt package, with one clear line when it is missing or too old."""

from __future__ import annotations

from types import ModuleType

from edge_sdk.core.errors import BackendUnavailableError, first_line

from .versions import TensorRTVersion, check_supported

INSTALL_HINT = "JetPack's python3-libnvinfer, or NVIDIA's tensorrt wheel: docs/nvidia.md"


def import_tensorrt() -> ModuleType:
    try:
        import tensorrt
    except ImportError as exc:
        raise BackendUnavailableError(f"TensorRT's Python package is not importable ({INSTALL_HINT})") from exc
    except OSError as exc:  # the bindings import, but libnvinfer does not load
        raise BackendUnavailableError(f"TensorRT's Python package cannot load its library: {first_line(exc)}") from exc
    check_supported(installed_version(tensorrt))
    return tensorrt


def installed_version(trt: ModuleType) -> TensorRTVersion:
    return TensorRTVersion.parse(str(trt.__version__))


def tensorrt_problem() -> str | None:
    """Why the tensorrt backend cannot run here (one line), or None when TensorRT imports."""
    try:
        import_tensorrt()
    except BackendUnavailableError as exc:
        return str(exc)
    return None
