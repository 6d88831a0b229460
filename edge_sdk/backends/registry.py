"""The one table of backends. A new backend is a sub-package and one entry here; the profile's
`engine:` union, `doctor`, `profiles list` and the runtime's layout follow from it. Heavy libraries are
imported inside each backend, lazily."""

from __future__ import annotations

from typing import Literal

from pydantic_core import InitErrorDetails, PydanticCustomError, ValidationError

from edge_sdk.core.errors import ConfigError

from .backend import Backend, BackendOptions, Package
from .onnxruntime import capabilities as onnxruntime_capabilities
from .onnxruntime.builder import OnnxRuntimeBuilder
from .onnxruntime.options import OnnxRuntimeOptions
from .onnxruntime.quantizer import OnnxRuntimeQuantizer
from .onnxruntime.runner import OnnxRuntimeRunner
from .tensorrt import capabilities as tensorrt_capabilities
from .tensorrt.builder import TensorRTBuilder
from .tensorrt.options import TensorRTOptions
from .tensorrt.runner import TensorRTRunner, cached_engine_problem

BACKENDS: dict[str, Backend] = {
    "onnxruntime": Backend(
        name="onnxruntime",
        options=OnnxRuntimeOptions,
        builder=OnnxRuntimeBuilder,
        runner=OnnxRuntimeRunner,
        install_hint="pip install 'edge-sdk[cpu]'",
        precisions=frozenset({"fp32", "fp16", "int8"}),
        runs_on_cpu=onnxruntime_capabilities.runs_on_cpu,
        exact_uint8_resize=onnxruntime_capabilities.exact_uint8_resize,
        devices=onnxruntime_capabilities.devices,
        host_notes=onnxruntime_capabilities.host_notes,
        worker_options=onnxruntime_capabilities.worker_options,
        int8=OnnxRuntimeQuantizer(),
        packages=(
            Package(
                ("onnxruntime", "onnxruntime-gpu", "onnxruntime-openvino", "onnxruntime-cann"),
                "onnxruntime",
                "onnxruntime backend",
                "pip install 'edge-sdk[cpu]'",
            ),
        ),
        doctor_facts=onnxruntime_capabilities.provider_status,
    ),
    "tensorrt": Backend(
        name="tensorrt",
        options=TensorRTOptions,
        builder=TensorRTBuilder,
        runner=TensorRTRunner,
        install_hint="JetPack's TensorRT, or NVIDIA's tensorrt wheel, and pip install 'edge-sdk[tensorrt]'",
        precisions=frozenset({"fp32", "fp16", "int8"}),
        runs_on_cpu=tensorrt_capabilities.runs_on_cpu,
        exact_uint8_resize=tensorrt_capabilities.exact_uint8_resize,
        devices=tensorrt_capabilities.devices,
        host_notes=tensorrt_capabilities.host_notes,
        packages=(
            Package(("tensorrt", "tensorrt-cu12", "tensorrt-cu13"), "tensorrt", "tensorrt backend", "docs/nvidia.md"),
            Package(
                ("cuda-python", "cuda-bindings"),
                "cuda.bindings",
                "tensorrt runner's CUDA (or pycuda)",
                "pip install 'edge-sdk[tensorrt]'",
            ),
        ),
        doctor_facts=tensorrt_capabilities.doctor_facts,
        int8=OnnxRuntimeQuantizer(),  # TensorRT 11 builds INT8 from the Q/DQ model this quantiser writes
        unavailable=tensorrt_capabilities.unavailable,
        describe_facts=tensorrt_capabilities.describe_facts,
        stale=cached_engine_problem,
    ),
}


def register_backend(backend: Backend) -> None:
    """Add a backend that lives outside the SDK (a plugin, a test's); profiles that name it validate
    from then on. Refuses a name already taken or options whose `backend:` is not that name."""
    if backend.name in BACKENDS:
        raise ConfigError(f"backend '{backend.name}' is already registered")
    if backend.options.model_fields["backend"].annotation != Literal[backend.name]:
        raise ConfigError(f"backend '{backend.name}': its options need `backend: Literal['{backend.name}']`")
    BACKENDS[backend.name] = backend


def unregister_backend(name: str) -> None:
    BACKENDS.pop(name, None)


def get_backend(name: str) -> Backend:
    try:
        return BACKENDS[name]
    except KeyError:
        raise ConfigError(f"unknown backend '{name}'; known backends: {', '.join(sorted(BACKENDS))}") from None


def backend_options(value: object) -> BackendOptions:
    """A profile's `engine:` mapping validated by the model of the backend it names."""
    if isinstance(value, BackendOptions):
        return value
    known = ", ".join(sorted(BACKENDS))
    if not isinstance(value, dict) or not isinstance(value.get("backend"), str):
        raise ValueError(f"expected a mapping with `backend:` one of {known}")
    if value["backend"] not in BACKENDS:  # reported at `backend:` itself, so the error has its line
        problem = PydanticCustomError(
            "unknown_backend",
            "unknown backend '{name}'; known backends: {known}",
            {"name": value["backend"], "known": known},
        )
        raise ValidationError.from_exception_data(
            "engine", [InitErrorDetails(type=problem, loc=("backend",), input=value["backend"])]
        )
    return BACKENDS[value["backend"]].options.model_validate(value)
