"""What the ONNX Runtime backend tells the rest of the SDK about a profile's options: where inference
runs (the runtime's worker layout), whether a folded uint8 resize is exact, the devices it names (for
`profiles list`) and what it will skip on this host (for `doctor`)."""

from __future__ import annotations

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
