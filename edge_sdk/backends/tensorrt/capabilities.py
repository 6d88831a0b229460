"""What the TensorRT backend tells the rest of the SDK about a profile's options: it runs on the GPU or
a DLA (not the CPU), what `profiles list` shows, what `doctor` reports, and whether it can run here."""

from __future__ import annotations

from typing import Any

from edge_sdk.core.errors import BackendUnavailableError
from edge_sdk.core.host import HostProbe

from .cuda_runtime import open_cuda
from .library import import_tensorrt, installed_version, tensorrt_problem
from .options import TensorRTOptions
from .placement import PlacementReport


def runs_on_cpu(options: TensorRTOptions) -> bool:
    return False


def exact_uint8_resize(options: TensorRTOptions) -> bool:
    """TensorRT's uint8 resize is not checked against cv2's; the folded resize then runs on float frames."""
    return False


def devices(options: TensorRTOptions) -> str:
    if options.dla_core is None:
        return f"GPU {options.device_id}"
    fallback = ", GPU fallback" if options.gpu_fallback else ""
    return f"DLA core {options.dla_core}{fallback}"


def unavailable(options: TensorRTOptions) -> str | None:
    """Why these options cannot run here: TensorRT or a CUDA binding missing, or no DLA for a DLA profile."""
    if problem := tensorrt_problem():
        return problem
    try:
        open_cuda(options.cuda, options.device_id)
    except BackendUnavailableError as exc:
        return str(exc)
    if options.dla_core is not None:
        board = HostProbe().facts().device_tree_model or ""
        if problem := installed_version(import_tensorrt()).dla_problem(board):
            return problem
    return None


def host_notes(options: TensorRTOptions) -> list[str]:
    problem = unavailable(options)
    return [problem] if problem else []


def doctor_facts() -> dict[str, str]:
    """TensorRT's version (or why it cannot load), the DLA cores, and the CUDA binding the runner would use."""
    facts = HostProbe().facts()
    problem = tensorrt_problem()
    result = {"TensorRT": problem or f"{import_tensorrt().__version__} (usable)"}
    result["DLA cores"] = str(facts.dla_cores)
    try:
        result["CUDA binding"] = open_cuda("auto").name
    except BackendUnavailableError as exc:
        result["CUDA binding"] = str(exc)
    return result


def describe_facts(facts: dict[str, Any]) -> list[str]:
    """The target, the build plan, its notes and the DLA placement report of a TensorRT build."""
    lines = []
    if "target" in facts:
        lines.append(f"target: {facts['target']}")
    plan = facts.get("build_plan", {})
    if plan:
        device = f"DLA core {plan['dla_core']}" if plan.get("dla_core") is not None else "GPU"
        flags = ", ".join(plan.get("builder_flags", [])) or "none"
        network = ", ".join(plan.get("network_flags", [])) or "none"
        level = plan.get("optimization_level")
        lines.append(
            f"build: {plan.get('precision')} on {device}; builder flags {flags}; network flags {network}; "
            f"optimisation level {'n/a' if level is None else level}; workspace {plan.get('workspace_bytes', 0) >> 20} MiB"
        )
        for shape_range in plan.get("shape_ranges", []):
            dims = {end: "x".join(str(d) for d in shape_range[end]) for end in ("min", "opt", "max")}
            lines.append(f"shapes {shape_range['name']}: min {dims['min']}, opt {dims['opt']}, max {dims['max']}")
        lines += [f"note: {note}" for note in plan.get("notes", [])]
    if "build_seconds" in facts:
        lines.append(f"built in {facts['build_seconds']:.1f} s; timing cache {facts.get('timing_cache', 'off')}")
    if isinstance(facts.get("dla_placement"), dict):
        lines += [
            f"DLA placement: {line.strip()}" for line in PlacementReport.from_dict(facts["dla_placement"]).lines()
        ]
    return lines
