"""The one explicit table of backends. Heavy libraries are imported inside each backend, lazily."""

from __future__ import annotations

from edge_sdk.core.errors import ConfigError

from .backend import Backend
from .onnxruntime import capabilities as onnxruntime_capabilities
from .onnxruntime.builder import OnnxRuntimeBuilder
from .onnxruntime.runner import OnnxRuntimeRunner

BACKENDS: dict[str, Backend] = {
    "onnxruntime": Backend(
        name="onnxruntime",
        builder=OnnxRuntimeBuilder,
        runner=OnnxRuntimeRunner,
        install_hint="pip install 'edge-sdk[cpu]'",
        runs_on_cpu=onnxruntime_capabilities.runs_on_cpu,
        exact_uint8_resize=onnxruntime_capabilities.exact_uint8_resize,
        devices=onnxruntime_capabilities.devices,
        host_notes=onnxruntime_capabilities.host_notes,
    ),
}


def get_backend(name: str) -> Backend:
    try:
        return BACKENDS[name]
    except KeyError:
        raise ConfigError(f"unknown backend '{name}'; known backends: {', '.join(sorted(BACKENDS))}") from None
