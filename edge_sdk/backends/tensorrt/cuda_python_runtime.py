"""CudaRuntime through cuda-python's runtime API (`cuda.bindings.runtime`; `cuda.cudart` before 12.6).
Every call returns (error, values...); `_check` turns a failure into one line naming the call."""

from __future__ import annotations

import ctypes
import math
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from edge_sdk.core.errors import BackendUnavailableError, InferenceError

from .cuda_runtime import (
    CudaRuntime,
    DeviceBuffer,
    DeviceFacts,
    Event,
    GraphExec,
    RegisteredHost,
    Stream,
    contiguous_nbytes,
)


def import_cudart() -> Any:
    try:
        from cuda.bindings import runtime
    except ImportError:
        from cuda import cudart as runtime  # cuda-python before 12.6
    return runtime


class CudaPythonRuntime(CudaRuntime):
    name = "cuda-python"

    def __init__(self, device_id: int = 0):
        self.rt = import_cudart()
        error, count = self.rt.cudaGetDeviceCount()
        if error != self.rt.cudaError_t.cudaSuccess or count == 0:
            raise BackendUnavailableError(f"no CUDA device ({self._error_text(error)})")
        if device_id >= count:
            raise BackendUnavailableError(f"GPU {device_id} does not exist; this host has {count}")
        self.device_id = device_id
        self._call("cudaSetDevice", device_id)

    def _error_text(self, error: Any) -> str:
        _, text = self.rt.cudaGetErrorString(error)
        return text.decode() if isinstance(text, bytes) else str(text)

    def _call(self, name: str, *args: Any) -> Any:
        result = getattr(self.rt, name)(*args)
        error, values = result[0], result[1:]
        if error != self.rt.cudaError_t.cudaSuccess:
            raise InferenceError(f"CUDA {name} failed: {self._error_text(error)}")
        return values[0] if len(values) == 1 else values or None

    def device(self) -> DeviceFacts:
        props = self._call("cudaGetDeviceProperties", self.device_id)
        name = props.name.decode(errors="replace") if isinstance(props.name, bytes) else str(props.name)
        return DeviceFacts(
            name.rstrip("\0"),
            (int(props.major), int(props.minor)),
            bool(props.integrated),
            bool(props.canMapHostMemory),
        )

    def pinned_empty(self, shape: tuple[int, ...], dtype: npt.DTypeLike) -> np.ndarray:
        dtype = np.dtype(dtype)
        used = math.prod(shape) * dtype.itemsize
        # Portable: page-locked for every CUDA context, a TensorRT's or another library's included.
        pointer = int(self._call("cudaHostAlloc", max(used, 1), self.rt.cudaHostAllocPortable))
        memory = (ctypes.c_uint8 * max(used, 1)).from_address(pointer)
        weakref.finalize(memory, self.rt.cudaFreeHost, pointer)
        flat = np.frombuffer(memoryview(memory), dtype=np.uint8)  # keeps `memory`, hence the allocation, alive
        return flat[:used].view(dtype).reshape(shape)

    def device_alloc(self, nbytes: int) -> DeviceBuffer:
        return _Buffer(self, int(self._call("cudaMalloc", max(nbytes, 1))), nbytes)

    def stream(self) -> Stream:
        flags = self.rt.cudaStreamNonBlocking
        return _Stream(self, self._call("cudaStreamCreateWithFlags", flags))

    def event(self, timing: bool = True) -> Event:
        flags = self.rt.cudaEventDefault if timing else self.rt.cudaEventDisableTiming
        return _Event(self, self._call("cudaEventCreateWithFlags", flags))

    def copy_to_device(self, destination: int, source: np.ndarray, stream: Stream) -> None:
        kind = self.rt.cudaMemcpyKind.cudaMemcpyHostToDevice
        self._call("cudaMemcpyAsync", destination, source.ctypes.data, contiguous_nbytes(source), kind, _raw(stream))

    def copy_to_host(self, destination: np.ndarray, source: int, stream: Stream) -> None:
        kind = self.rt.cudaMemcpyKind.cudaMemcpyDeviceToHost
        nbytes = contiguous_nbytes(destination)
        self._call("cudaMemcpyAsync", destination.ctypes.data, source, nbytes, kind, _raw(stream))

    def copy_device_to_device(self, destination: int, source: int, nbytes: int, stream: Stream) -> None:
        kind = self.rt.cudaMemcpyKind.cudaMemcpyDeviceToDevice
        self._call("cudaMemcpyAsync", destination, source, nbytes, kind, _raw(stream))

    def capture(self, stream: Stream, enqueue: Callable[[], None]) -> GraphExec:
        mode = self.rt.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal
        self._call("cudaStreamBeginCapture", _raw(stream), mode)
        try:
            enqueue()
        finally:
            graph = self._call("cudaStreamEndCapture", _raw(stream))
        try:
            executable = self._call("cudaGraphInstantiate", graph, 0)
        finally:
            self._call("cudaGraphDestroy", graph)
        return _Graph(self, executable)

    def register_host(self, array: np.ndarray, mapped: bool) -> RegisteredHost:
        nbytes = contiguous_nbytes(array)
        flags = self.rt.cudaHostRegisterMapped if mapped else self.rt.cudaHostRegisterDefault
        pointer = int(array.ctypes.data)
        self._call("cudaHostRegister", pointer, nbytes, flags)
        device = int(self._call("cudaHostGetDevicePointer", pointer, 0)) if mapped else None
        return _Registered(self, pointer, nbytes, device)


def _raw(stream: Stream) -> Any:
    return stream.raw  # type: ignore[attr-defined]


class _Buffer(DeviceBuffer):
    def __init__(self, cuda: CudaPythonRuntime, pointer: int, nbytes: int):
        self.cuda, self.pointer, self.nbytes = cuda, pointer, nbytes

    def free(self) -> None:
        if self.pointer:
            self.cuda._call("cudaFree", self.pointer)
            self.pointer = 0


class _Stream(Stream):
    def __init__(self, cuda: CudaPythonRuntime, raw: Any):
        self.cuda, self.raw, self.handle = cuda, raw, int(raw)

    def synchronize(self) -> None:
        self.cuda._call("cudaStreamSynchronize", self.raw)

    def destroy(self) -> None:
        if self.raw is not None:
            self.cuda._call("cudaStreamDestroy", self.raw)
            self.raw = None


class _Event(Event):
    def __init__(self, cuda: CudaPythonRuntime, raw: Any):
        self.cuda, self.raw = cuda, raw

    def record(self, stream: Stream) -> None:
        self.cuda._call("cudaEventRecord", self.raw, _raw(stream))

    def synchronize(self) -> None:
        self.cuda._call("cudaEventSynchronize", self.raw)

    def milliseconds_since(self, start: Event) -> float:
        return float(self.cuda._call("cudaEventElapsedTime", start.raw, self.raw))  # type: ignore[attr-defined]

    def destroy(self) -> None:
        self.cuda._call("cudaEventDestroy", self.raw)


class _Graph(GraphExec):
    def __init__(self, cuda: CudaPythonRuntime, raw: Any):
        self.cuda, self.raw = cuda, raw

    def launch(self, stream: Stream) -> None:
        self.cuda._call("cudaGraphLaunch", self.raw, _raw(stream))

    def destroy(self) -> None:
        self.cuda._call("cudaGraphExecDestroy", self.raw)


class _Registered(RegisteredHost):
    def __init__(self, cuda: CudaPythonRuntime, pointer: int, nbytes: int, device: int | None):
        self.cuda, self.host_pointer, self.nbytes, self.device_pointer = cuda, pointer, nbytes, device

    def unregister(self) -> None:
        if self.host_pointer:
            self.cuda._call("cudaHostUnregister", self.host_pointer)
            self.host_pointer = 0
