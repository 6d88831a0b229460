"""The one explicit table of backends. Heavy libraries are imported inside each backend, lazily."""

from __future__ import annotations

from edge_sdk.core.errors import ConfigError

from .backend import Backend
from .onnxruntime.builder import OnnxRuntimeBuilder
from .onnxruntime.runner import OnnxRuntimeRunner

BACKENDS: dict[str, Backend] = {
    "onnxruntime": Backend(
        name="onnxruntime",
        builder=OnnxRuntimeBuilder,
        runner=OnnxRuntimeRunner,
        install_hint="pip install 'edge-sdk[cpu]'",
    ),
}


def get_backend(name: str) -> Backend:
    try:
        return BACKENDS[name]
    except KeyError:
        raise ConfigError(f"unknown backend '{name}'; known backends: {', '.join(sorted(BACKENDS))}") from None
