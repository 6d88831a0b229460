"""What the TensorRT backend tells the rest of the SDK about a profile's options: it runs on the GPU or
a DLA (not the CPU), what `profiles list` shows, what `doctor` reports, and whether it can run here."""

from __future__ import annotations

from edge_sdk.core.errors import BackendUnavailableError
from edge_sdk.core.host import HostProbe

from .cuda_runtime import open_cuda
from .library import import_tensorrt, installed_version, tensorrt_problem
from .options import TensorRTOptions


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
