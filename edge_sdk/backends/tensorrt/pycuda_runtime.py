"""CudaRuntime through pycuda, on the device's primary context (the one TensorRT and the CUDA runtime
use), so buffers and streams are shared with the engine.

Two things go to the CUDA driver's own entry points (libcuda, through ctypes) on pycuda's context and
stream handle: graph capture, which pycuda (2026.1) does not have (cuStreamBeginCapture_v2,
cuStreamEndCapture, cuGraphInstantiateWithFlags, cuGraphLaunch), and host registration, where pycuda's
register_host_memory refused a FrameRing's shared-memory view on the H200 host with a SystemError while
the driver takes it (cuMemHostRegister_v2, cuMemHostGetDevicePointer_v2, cuMemHostUnregister).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from edge_sdk.core.errors import BackendUnavailableError, InferenceError, first_line

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

CAPTURE_MODE_THREAD_LOCAL = 1
"""CUstreamCaptureMode: CU_STREAM_CAPTURE_MODE_GLOBAL 0, THREAD_LOCAL 1, RELAXED 2 (cuda.h)."""
HOST_REGISTER_DEVICEMAP = 0x02
"""CU_MEMHOSTREGISTER_DEVICEMAP (cuda.h): map the registered memory into the device's address space."""


class PycudaRuntime(CudaRuntime):
    name = "pycuda"

    def __init__(self, device_id: int = 0):
        import pycuda.driver as driver

        self.driver = driver
        try:
            driver.init()
            count = driver.Device.count()
        except driver.Error as exc:
            raise BackendUnavailableError(f"no CUDA device ({first_line(exc)})") from None
        if device_id >= count:
            raise BackendUnavailableError(f"GPU {device_id} does not exist; this host has {count}")
        self.cu_device = driver.Device(device_id)
        self.context = self.cu_device.retain_primary_context()
        self.context.push()
        atexit.register(_pop, self.context)

    def device(self) -> DeviceFacts:
        attribute = self.driver.device_attribute
        return DeviceFacts(
            self.cu_device.name(),
            tuple(self.cu_device.compute_capability()),
            bool(self.cu_device.get_attribute(attribute.INTEGRATED)),
            bool(self.cu_device.get_attribute(attribute.CAN_MAP_HOST_MEMORY)),
        )

    def pinned_empty(self, shape: tuple[int, ...], dtype: npt.DTypeLike) -> np.ndarray:
        return self.driver.pagelocked_empty(shape, dtype, mem_flags=self.driver.host_alloc_flags.PORTABLE)

    def device_alloc(self, nbytes: int) -> DeviceBuffer:
        return _Buffer(self.driver.mem_alloc(max(nbytes, 1)), nbytes)

    def stream(self) -> Stream:
        return _Stream(self.driver.Stream())

    def event(self, timing: bool = True) -> Event:
        flags = 0 if timing else self.driver.event_flags.DISABLE_TIMING
        return _Event(self.driver.Event(flags))

    def copy_to_device(self, destination: int, source: np.ndarray, stream: Stream) -> None:
        contiguous_nbytes(source)
        self.driver.memcpy_htod_async(destination, source, stream.raw)  # type: ignore[attr-defined]

    def copy_to_host(self, destination: np.ndarray, source: int, stream: Stream) -> None:
        contiguous_nbytes(destination)
        self.driver.memcpy_dtoh_async(destination, source, stream.raw)  # type: ignore[attr-defined]

    def copy_device_to_device(self, destination: int, source: int, nbytes: int, stream: Stream) -> None:
        self.driver.memcpy_dtod_async(destination, source, nbytes, stream.raw)  # type: ignore[attr-defined]

    def capture(self, stream: Stream, enqueue: Callable[[], None]) -> GraphExec:
        libcuda = _libcuda()
        _check(libcuda, "cuStreamBeginCapture_v2", ctypes.c_void_p(stream.handle), CAPTURE_MODE_THREAD_LOCAL)
        graph = ctypes.c_void_p()
        try:
            enqueue()
        finally:
            _check(libcuda, "cuStreamEndCapture", ctypes.c_void_p(stream.handle), ctypes.byref(graph))
        executable = ctypes.c_void_p()
        try:
            _check(libcuda, "cuGraphInstantiateWithFlags", ctypes.byref(executable), graph, ctypes.c_ulonglong(0))
        finally:
            _check(libcuda, "cuGraphDestroy", graph)
        return _Graph(libcuda, executable)

    def register_host(self, array: np.ndarray, mapped: bool) -> RegisteredHost:
        nbytes = contiguous_nbytes(array)
        libcuda = _libcuda()
        pointer = int(array.ctypes.data)
        flags = HOST_REGISTER_DEVICEMAP if mapped else 0
        _check(libcuda, "cuMemHostRegister_v2", ctypes.c_void_p(pointer), ctypes.c_size_t(nbytes), ctypes.c_uint(flags))
        device = None
        if mapped:
            address = ctypes.c_uint64()
            _check(
                libcuda,
                "cuMemHostGetDevicePointer_v2",
                ctypes.byref(address),
                ctypes.c_void_p(pointer),
                ctypes.c_uint(0),
            )
            device = int(address.value)
        return _Registered(libcuda, pointer, nbytes, device)


def _pop(context: Any) -> None:
    with contextlib.suppress(Exception):  # the interpreter is exiting; the driver frees the context with the process
        context.pop()


def _libcuda() -> ctypes.CDLL:
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise BackendUnavailableError(f"cannot load the CUDA driver (libcuda.so.1): {exc}") from None


def _check(libcuda: ctypes.CDLL, name: str, *args: Any) -> None:
    result = getattr(libcuda, name)(*args)
    if result != 0:
        text = ctypes.c_char_p()
        libcuda.cuGetErrorString(result, ctypes.byref(text))
        raise InferenceError(f"CUDA {name} failed: {(text.value or b'error %d' % result).decode()}")


class _Buffer(DeviceBuffer):
    def __init__(self, allocation: Any, nbytes: int):
        self.allocation, self.pointer, self.nbytes = allocation, int(allocation), nbytes

    def free(self) -> None:
        if self.allocation is not None:
            self.allocation.free()
            self.allocation, self.pointer = None, 0


class _Stream(Stream):
    def __init__(self, raw: Any):
        self.raw, self.handle = raw, int(raw.handle)

    def synchronize(self) -> None:
        self.raw.synchronize()

    def destroy(self) -> None:
        self.raw = None  # pycuda destroys the stream with the object


class _Event(Event):
    def __init__(self, raw: Any):
        self.raw = raw

    def record(self, stream: Stream) -> None:
        self.raw.record(stream.raw)  # type: ignore[attr-defined]

    def synchronize(self) -> None:
        self.raw.synchronize()

    def milliseconds_since(self, start: Event) -> float:
        return float(self.raw.time_since(start.raw))  # type: ignore[attr-defined]

    def destroy(self) -> None:
        self.raw = None


class _Graph(GraphExec):
    def __init__(self, libcuda: ctypes.CDLL, raw: ctypes.c_void_p):
        self.libcuda, self.raw = libcuda, raw

    def launch(self, stream: Stream) -> None:
        _check(self.libcuda, "cuGraphLaunch", self.raw, ctypes.c_void_p(stream.handle))

    def destroy(self) -> None:
        if self.raw:
            _check(self.libcuda, "cuGraphExecDestroy", self.raw)
            self.raw = ctypes.c_void_p()


class _Registered(RegisteredHost):
    def __init__(self, libcuda: ctypes.CDLL, pointer: int, nbytes: int, device: int | None):
        self.libcuda, self.host_pointer, self.nbytes, self.device_pointer = libcuda, pointer, nbytes, device

    def unregister(self) -> None:
        if self.host_pointer:
            _check(self.libcuda, "cuMemHostUnregister", ctypes.c_void_p(self.host_pointer))
            self.host_pointer = 0
