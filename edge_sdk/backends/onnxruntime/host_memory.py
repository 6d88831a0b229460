"""Page-locked (pinned) host arrays for the inputs of GPU engines.

A GPU engine copies each host input to the device with cudaMemcpy (see io_binding.py); from pageable
memory the driver stages the copy through a pinned buffer of its own, from page-locked memory it
runs at the link's DMA speed. A caller that writes its frames straight into a `pinned_empty` array
and feeds that array gets the fast copy; nothing else changes (it is a numpy array).

The memory comes from the first of cuda-python (`cuda.bindings.runtime`, or `cuda.cudart` before
cuda-python 12.6), CuPy and PyTorch that is installed; each is imported only when asked.
"""

from __future__ import annotations

import ctypes
import math
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from edge_sdk.core.errors import BackendUnavailableError, first_line

INSTALL_HINT = "pip install cuda-python (or CuPy, or PyTorch with CUDA)"


def pinned_empty(shape: Sequence[int], dtype: Any) -> np.ndarray:
    """An uninitialised C-contiguous numpy array in page-locked host memory, freed with the array.

    Raises BackendUnavailableError with one line when no allocator is installed or CUDA refuses.
    """
    shape, dtype = tuple(int(d) for d in shape), np.dtype(dtype)
    problems = []
    for name, allocate in _ALLOCATORS:
        try:
            array = allocate(shape, dtype)
        except ImportError:
            problems.append(f"{name} is not installed")
        except Exception as exc:  # a driver or runtime refusing: try the next allocator
            problems.append(f"{name}: {first_line(exc)}")
        else:
            start = array.ctypes.data
            _pinned[start] = start + array.nbytes
            weakref.finalize(array, _pinned.pop, start, None)
            return array
    raise BackendUnavailableError(f"cannot allocate page-locked host memory ({'; '.join(problems)}); {INSTALL_HINT}")


def is_pinned(array: np.ndarray) -> bool:
    """Whether `array` lies in a live `pinned_empty` allocation (a view of one counts)."""
    address = array.ctypes.data
    return any(start <= address < end for start, end in _pinned.items())


_pinned: dict[int, int] = {}
"""Start -> end address of the pinned_empty arrays alive in this process."""


def _cuda_python(shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
    try:
        from cuda.bindings import runtime
    except ImportError:
        from cuda import cudart as runtime  # cuda-python before 12.6
    size = max(1, math.prod(shape) * dtype.itemsize)
    # Portable: page-locked for every CUDA context, ONNX Runtime's included (it may load its own runtime).
    flags = getattr(runtime, "cudaHostAllocPortable", runtime.cudaHostAllocDefault)
    error, pointer = runtime.cudaHostAlloc(size, flags)
    if error != runtime.cudaError_t.cudaSuccess:
        raise RuntimeError(f"cudaHostAlloc({size}) failed: {error.name if hasattr(error, 'name') else error}")
    memory = (ctypes.c_uint8 * size).from_address(pointer)
    weakref.finalize(memory, runtime.cudaFreeHost, pointer)
    flat = np.frombuffer(memoryview(memory), dtype=np.uint8)  # keeps `memory`, hence the allocation, alive
    return flat[: math.prod(shape) * dtype.itemsize].view(dtype).reshape(shape)


def _cupy(shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
    import cupyx

    return np.asarray(cupyx.empty_pinned(shape, dtype=dtype))


def _torch(shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
    import torch

    torch_dtype = torch.from_numpy(np.empty(0, dtype)).dtype
    return torch.empty(shape, dtype=torch_dtype, pin_memory=True).numpy()


_ALLOCATORS: list[tuple[str, Callable[[tuple[int, ...], np.dtype[Any]], np.ndarray]]] = [
    ("cuda-python", _cuda_python),
    ("cupy", _cupy),
    ("torch", _torch),
]
