"""SessionOptions and provider lists from a profile's ONNX Runtime options."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path
from typing import Any

from edge_sdk.core.errors import BackendUnavailableError, ConfigError
from edge_sdk.core.precision import Precision

from . import providers
from .library import import_onnxruntime
from .options import INSTALL_HINTS, CudaProvider, ExecutionProvider, OnnxRuntimeOptions

OPTIMIZATION_LEVELS = {"basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL"}

# ONNX Runtime builds TensorRT/CANN/OpenVINO engines lazily inside the session; they keep them here,
# inside our cache entry, so one key covers both.
PROVIDER_CACHE_DIR = "provider_cache"

# Providers that run the QDQ models an int8 build writes (TensorRT takes its int8 scales from the Q/DQ nodes).
INT8_PROVIDERS = frozenset({"cpu", "xnnpack", "tensorrt", "openvino"})
FP16_PROVIDERS = frozenset({"tensorrt", "cuda", "cann", "openvino"})
CPU_PROVIDERS = frozenset({"cpu", "xnnpack"})
# fp16 first providers without an fp16 option of their own (TensorRT, CANN and OpenVINO take one):
# an fp16 build converts the graph to float16 for them (fp16.py).
GRAPH_FP16_PROVIDERS = frozenset({"CUDAExecutionProvider"})


def provider_list(
    options: OnnxRuntimeOptions, precision: Precision, entry_dir: Path
) -> list[tuple[str, dict[str, Any]]]:
    """The (provider name, provider options) list to give InferenceSession, in priority order.

    A provider onnxruntime lists but cannot load here (TensorRT without libnvinfer) is left out with
    one warning, so ONNX Runtime never tries it and prints its fallback dump.
    """
    cache_dir = str(entry_dir / PROVIDER_CACHE_DIR)
    return [
        (p.ort_name, p.ort_options(precision, cache_dir))
        for p in options.execution_providers
        if not providers.skip_unloadable(p.ort_name)
    ]


def run_provider_list(
    options: OnnxRuntimeOptions, precision: Precision, entry_dir: Path
) -> list[tuple[str, dict[str, Any]]]:
    """`provider_list` for a session that runs a built engine: with the CUDA provider's run options."""
    cuda = next((p for p in options.execution_providers if isinstance(p, CudaProvider)), None)
    extra = cuda.run_options() if cuda is not None else {}
    return [
        (name, {**opts, **extra} if name == CudaProvider.ort_name else opts)
        for name, opts in provider_list(options, precision, entry_dir)
    ]


def open_session(source: str | bytes, so: Any, providers: list[tuple[str, dict[str, Any]]]) -> Any:
    """An InferenceSession on exactly `providers`.

    When a provider refuses its options (a device id the host does not have), ONNX Runtime prints an
    'EP Error' dump to stdout and quietly builds the session on the CPU instead; here that dump is
    caught and becomes one ConfigError line, so an engine never runs somewhere the profile did not say.
    """
    ort = import_onnxruntime()
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        session = ort.InferenceSession(source, so, providers=providers)
    dump = printed.getvalue()
    if "EP Error" in dump:
        raise ConfigError(f"{providers[0][0]} refused the profile's provider options: {_ep_error_reason(dump)}")
    return session


def _ep_error_reason(dump: str) -> str:
    """ONNX Runtime's reason from its fallback dump, without source file names and C++ signatures."""
    line = next((text for text in dump.splitlines() if text.startswith("EP Error")), dump)
    reason = line.rsplit(" : ", 1)[-1].split(" when using ")[0]
    reason = re.sub(r"\S+\.(?:cc|cpp|h):\d+ (?:[\w:]+\(\) )?", "", reason)
    return reason.strip() or line.strip()


def check_providers(options: OnnxRuntimeOptions, precision: Precision) -> None:
    """Fail before building when a provider is missing, or cannot load where the profile needs it,
    or the providers cannot run the precision.

    A listed provider that cannot load is skipped (see `provider_list`) unless the profile needs it:
    TensorRT on a DLA core (nothing else reaches the DLA), the only providers that run the
    precision, or the last accelerator of a profile that names one (it would run on the CPU alone).
    """
    ort = import_onnxruntime()
    available = set(providers.available_providers())
    for provider in options.execution_providers:
        if provider.ort_name not in available:
            raise BackendUnavailableError(
                f"execution provider '{provider.type}' ({provider.ort_name}) is not in the installed "
                f"onnxruntime {ort.__version__} (it has {', '.join(sorted(available))}); "
                f"install: {INSTALL_HINTS[provider.type]}"
            )
    problems = {
        p.type: problem for p in options.execution_providers if (problem := providers.provider_load_problem(p.ort_name))
    }
    loadable = [p for p in options.execution_providers if p.type not in problems]
    for provider in options.execution_providers:
        if provider.type in problems and (why := _needed_because(provider, loadable, precision)):
            raise BackendUnavailableError(
                f"execution provider '{provider.type}' ({provider.ort_name}) is listed by onnxruntime "
                f"{ort.__version__} but cannot load: {problems[provider.type]}; the profile needs it: {why}"
            )
    types = {p.type for p in loadable}
    if precision == "fp16" and not types & FP16_PROVIDERS:
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


def _needed_because(provider: ExecutionProvider, loadable: list[ExecutionProvider], precision: Precision) -> str | None:
    """Why the profile cannot do without `provider`, which cannot load; None when it can skip it."""
    if provider.type == "tensorrt" and provider.dla_core is not None:
        return f"only TensorRT runs on DLA core {provider.dla_core}"
    types = {p.type for p in loadable}
    if precision == "fp16" and provider.type in FP16_PROVIDERS and not types & FP16_PROVIDERS:
        return "no other provider of the profile runs fp16"
    if precision == "int8" and provider.type in INT8_PROVIDERS and not types & INT8_PROVIDERS:
        return "no other provider of the profile runs int8"
    if not types - CPU_PROVIDERS:
        return "without it the profile would run on the CPU alone"
    return None


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
