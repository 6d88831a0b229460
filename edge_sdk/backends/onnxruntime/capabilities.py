"""What the ONNX Runtime backend tells the rest of the SDK about a profile's options: where inference
runs (the runtime's worker layout), whether a folded uint8 resize is exact, the devices it names (for
`profiles list`), what it will skip on this host and which providers can load here (for `doctor`)."""

from __future__ import annotations

from edge_sdk.core.errors import BackendUnavailableError

from . import providers
from .options import OnnxRuntimeOptions

CPU_PROVIDERS = frozenset({"cpu", "xnnpack"})
"""Providers that run on the host's CPU cores."""
INTEGER_RESIZE_PROVIDERS = frozenset({"cpu", "xnnpack"})
"""Providers whose uint8 NHWC bilinear Resize is exact (ONNX Runtime's CPU integer kernel; XNNPACK
leaves Resize to it). CUDA's is not (see graph/preprocess_folding.py); for the others it is unverified."""


def runs_on_cpu(options: OnnxRuntimeOptions) -> bool:
    """Whether every provider of the profile is a CPU one (then several single-threaded workers win)."""
    return all(p.type in CPU_PROVIDERS for p in options.execution_providers)


def exact_uint8_resize(options: OnnxRuntimeOptions) -> bool:
    """Whether a folded resize may run on the raw uint8 frame: only when every provider is a CPU one."""
    return all(p.type in INTEGER_RESIZE_PROVIDERS for p in options.execution_providers)


def devices(options: OnnxRuntimeOptions) -> str:
    """The providers, in priority order, as `profiles list` shows them."""
    return ", ".join(p.type for p in options.execution_providers)


def host_notes(options: OnnxRuntimeOptions) -> list[str]:
    """Listed providers this host cannot load, which sessions skip (one line each, for doctor)."""
    return [
        f"skips {p.ort_name} ({problem})"
        for p in options.execution_providers
        if (problem := providers.provider_load_problem(p.ort_name))
    ]


def worker_options(options: OnnxRuntimeOptions, threads: int | None, share_cpu: bool) -> OnnxRuntimeOptions:
    """`threads` per inference (several workers on few cores each take fewer); with `share_cpu`, idle
    threads do not busy-wait, so they leave the cores to the other stage processes."""
    if threads is not None:
        options = options.model_copy(update={"intra_op_threads": threads})
    if share_cpu:
        options = options.model_copy(update={"allow_spinning": False})
    return options


def provider_status() -> dict[str, str]:
    """Each provider this onnxruntime lists: "usable" or "listed but cannot load: <missing library; how to
    install it>"; empty without onnxruntime (doctor's package table says how to install it)."""
    try:
        listed = providers.available_providers()
    except BackendUnavailableError:
        return {}
    status = {}
    for name in listed:
        problem = providers.provider_load_problem(name)
        status[name] = "usable" if problem is None else f"listed but cannot load: {problem}"
    return status
