"""The CUDA operations the TensorRT runner needs, behind one interface with two implementations:
cuda-python (`cuda.bindings.runtime`, as NVIDIA's current TensorRT samples use it) and pycuda.

Everything here runs without TensorRT: page-locked and device buffers, a stream, async copies both
ways, events, CUDA graph capture of whatever is enqueued on the stream, and registering existing host
memory (a frame ring's slot) as page-locked, optionally mapped so the GPU reads it in place.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from edge_sdk.core.errors import BackendUnavailableError, first_line

CUDA_INSTALL_HINT = "pip install cuda-python (or pycuda, built against the box's CUDA: docs/nvidia.md)"


@dataclass(frozen=True)
class DeviceFacts:
    name: str
    compute_capability: tuple[int, int]
    integrated: bool
    """Shares DRAM with the CPU (Jetson): mapped host memory is read in place, no copy."""
    can_map_host_memory: bool


class DeviceBuffer(ABC):
    """Device memory of `nbytes`; `pointer` is its address."""

    pointer: int
    nbytes: int

    @abstractmethod
    def free(self) -> None: ...


class Stream(ABC):
    handle: int
    """The cudaStream_t as an integer, for TensorRT's execute_async_v3 and kernel launches."""

    @abstractmethod
    def synchronize(self) -> None: ...

    @abstractmethod
    def destroy(self) -> None: ...


class Event(ABC):
    @abstractmethod
    def record(self, stream: Stream) -> None: ...

    @abstractmethod
    def synchronize(self) -> None: ...

    @abstractmethod
    def milliseconds_since(self, start: Event) -> float: ...

    @abstractmethod
    def destroy(self) -> None: ...


class GraphExec(ABC):
    """A captured and instantiated CUDA graph."""

    @abstractmethod
    def launch(self, stream: Stream) -> None: ...

    @abstractmethod
    def destroy(self) -> None: ...


class RegisteredHost(ABC):
    """Existing host memory, page-locked in place; `device_pointer` is set when it was mapped."""

    host_pointer: int
    nbytes: int
    device_pointer: int | None

    @abstractmethod
    def unregister(self) -> None: ...


class CudaRuntime(ABC):
    """One CUDA binding's view of one device (its primary context, shared with TensorRT)."""

    name: str

    @abstractmethod
    def device(self) -> DeviceFacts: ...

    @abstractmethod
    def pinned_empty(self, shape: tuple[int, ...], dtype: npt.DTypeLike) -> np.ndarray:
        """A page-locked host array, freed when the array is."""

    @abstractmethod
    def device_alloc(self, nbytes: int) -> DeviceBuffer: ...

    @abstractmethod
    def stream(self) -> Stream: ...

    @abstractmethod
    def event(self, timing: bool = True) -> Event: ...

    @abstractmethod
    def copy_to_device(self, destination: int, source: np.ndarray, stream: Stream) -> None:
        """Enqueue a copy of the C-contiguous `source` to device address `destination`."""

    @abstractmethod
    def copy_to_host(self, destination: np.ndarray, source: int, stream: Stream) -> None:
        """Enqueue a copy from device address `source` into the C-contiguous `destination`."""

    @abstractmethod
    def copy_device_to_device(self, destination: int, source: int, nbytes: int, stream: Stream) -> None: ...

    @abstractmethod
    def capture(self, stream: Stream, enqueue: Callable[[], None]) -> GraphExec:
        """Run `enqueue` with `stream` capturing, and instantiate what it enqueued as a graph."""

    @abstractmethod
    def register_host(self, array: np.ndarray, mapped: bool) -> RegisteredHost:
        """Page-lock `array`'s memory in place (cudaHostRegister); `mapped` also maps it into the device's
        address space (cudaHostRegisterMapped), so kernels read it without a copy."""


def open_cuda(which: str = "auto", device_id: int = 0) -> CudaRuntime:
    """The CUDA runtime `which` names ("cuda-python", "pycuda", or "auto": cuda-python, else pycuda) on
    GPU `device_id`; BackendUnavailableError with one line when neither can run."""
    from .cuda_python_runtime import CudaPythonRuntime
    from .pycuda_runtime import PycudaRuntime

    kinds: dict[str, Callable[[int], CudaRuntime]] = {"cuda-python": CudaPythonRuntime, "pycuda": PycudaRuntime}
    if which not in (*kinds, "auto"):
        raise BackendUnavailableError(f"unknown CUDA binding {which!r}; expected auto, cuda-python or pycuda")
    problems = []
    for name in kinds if which == "auto" else (which,):
        try:
            return kinds[name](device_id)
        except ImportError as exc:
            problems.append(f"{name} is not installed ({first_line(exc)})")
        except BackendUnavailableError as exc:
            problems.append(f"{name}: {exc}")
    raise BackendUnavailableError(f"no CUDA binding can run: {'; '.join(problems)}; {CUDA_INSTALL_HINT}")


def contiguous_nbytes(array: np.ndarray) -> int:
    if not array.flags.c_contiguous:
        raise ValueError("CUDA copies need C-contiguous arrays")
    return int(array.nbytes)
