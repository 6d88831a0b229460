"""SessionOptions and provider lists from a profile's ONNX Runtime options."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edge_sdk.errors import BackendUnavailableError, ConfigError
from edge_sdk.precision import Precision

from .library import import_onnxruntime
from .options import INSTALL_HINTS, OnnxRuntimeOptions

OPTIMIZATION_LEVELS = {"basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL"}

# ONNX Runtime builds TensorRT/CANN/OpenVINO engines lazily inside the session; they keep them here,
# inside our cache entry, so one key covers both.
PROVIDER_CACHE_DIR = "provider_cache"

# Providers that run the QDQ models an int8 build writes (TensorRT takes its int8 scales from the Q/DQ nodes).
INT8_PROVIDERS = frozenset({"cpu", "xnnpack", "tensorrt", "openvino"})


def provider_list(
    options: OnnxRuntimeOptions, precision: Precision, entry_dir: Path
) -> list[tuple[str, dict[str, Any]]]:
    """The (provider name, provider options) list to give InferenceSession, in priority order."""
    cache_dir = str(entry_dir / PROVIDER_CACHE_DIR)
    return [(p.ort_name, p.ort_options(precision, cache_dir)) for p in options.execution_providers]


def check_providers(options: OnnxRuntimeOptions, precision: Precision) -> None:
    """Fail before building when a provider is missing or cannot run the precision."""
    ort = import_onnxruntime()
    available = set(ort.get_available_providers())
    for provider in options.execution_providers:
        if provider.ort_name not in available:
            raise BackendUnavailableError(
                f"execution provider '{provider.type}' ({provider.ort_name}) is not in the installed "
                f"onnxruntime {ort.__version__} (it has {', '.join(sorted(available))}); "
                f"install: {INSTALL_HINTS[provider.type]}"
            )
    types = {p.type for p in options.execution_providers}
    if precision == "fp16" and not types & {"tensorrt", "cuda", "cann", "openvino"}:
        raise ConfigError(
            f"precision fp16 needs a GPU/NPU execution provider (tensorrt, cuda, cann, openvino), got {sorted(types)}"
        )
    cpu_openvino = [p for p in options.execution_providers if p.type == "openvino" and p.device_type.startswith("CPU")]
    if precision == "fp16" and cpu_openvino:
        raise ConfigError("OpenVINO on the CPU runs FP32 only; use precision fp32 or device_type GPU/NPU")
    if precision == "int8" and not types & INT8_PROVIDERS:
        raise ConfigError(
            f"precision int8 runs quantised (QDQ) models on the {', '.join(sorted(INT8_PROVIDERS))} execution "
            f"providers, got {sorted(types)}"
        )


def session_options(options: OnnxRuntimeOptions, optimization: str | None) -> Any:
    """SessionOptions with the profile's threading; `optimization` None disables graph optimisation."""
    ort = import_onnxruntime()
    so = ort.SessionOptions()
    so.enable_cpu_mem_arena = all(p.arena for p in options.execution_providers if p.type == "cpu")
    so.intra_op_num_threads = options.intra_op_threads
    so.inter_op_num_threads = options.inter_op_threads
    if options.inter_op_threads > 1:
        so.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    if not options.allow_spinning:
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        so.add_session_config_entry("session.inter_op.allow_spinning", "0")
    level = OPTIMIZATION_LEVELS[optimization] if optimization else "ORT_DISABLE_ALL"
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    return so
