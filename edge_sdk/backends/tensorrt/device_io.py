"""Feeding an engine on a CUDA stream: page-locked staging and device buffers per tensor, allocated once
at their largest shape; input shapes per call; async copies in, the engine's enqueue, async copies out,
one synchronisation. Optionally the whole call is captured once as a CUDA graph and replayed (static
shapes only), and host memory registered as mapped (a Jetson's frame ring) is handed to the engine in
place, without a copy."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from edge_sdk.core.errors import InferenceError

from .cuda_runtime import CudaRuntime, DeviceBuffer, GraphExec, RegisteredHost
from .engine_io import EngineExecution, TensorSpec, check_input_shape


@dataclass
class _Tensor:
    spec: TensorSpec
    device: DeviceBuffer
    staging: np.ndarray
    """Page-locked bytes of max_nbytes; the copies go through it."""
    shape: tuple[int, ...] | None = None
    address: int | None = None
    """The device address last given to the engine."""


class DeviceIO:
    def __init__(self, cuda: CudaRuntime, execution: EngineExecution, cuda_graph: bool = False):
        self.cuda = cuda
        self.execution = execution
        self.stream = cuda.stream()
        self.tensors = {
            spec.name: _Tensor(
                spec, cuda.device_alloc(spec.max_nbytes), cuda.pinned_empty((spec.max_nbytes,), np.dtype(np.uint8))
            )
            for spec in execution.tensors()
        }
        self.static = all(t.spec.static for t in self.tensors.values())
        self.use_graph = cuda_graph and self.static
        self.graph: GraphExec | None = None
        self.calls = 0
        self._mapped: list[RegisteredHost] = []  # sorted by host address

    # --- host memory the engine may read in place ---------------------------------------------------------
    def register_host_memory(self, array: np.ndarray) -> RegisteredHost:
        """Page-lock and map `array` (e.g. a frame ring's shared memory); inputs that lie inside it are then
        read by the engine at its mapped device address, with no copy."""
        registered = self.cuda.register_host(array, mapped=True)
        self._mapped.append(registered)
        self._mapped.sort(key=lambda r: r.host_pointer)
        return registered

    def _mapped_address(self, array: np.ndarray) -> int | None:
        if not self._mapped or not array.flags.c_contiguous:
            return None
        start = int(array.ctypes.data)
        index = bisect_right([r.host_pointer for r in self._mapped], start) - 1
        if index < 0:
            return None
        region = self._mapped[index]
        if region.device_pointer is None or start + array.nbytes > region.host_pointer + region.nbytes:
            return None
        return region.device_pointer + (start - region.host_pointer)

    # --- one call -------------------------------------------------------------------------------------------
    def run(self, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        in_place = {}
        for name, array in feed.items():
            tensor = self.tensors[name]
            shape = tuple(int(d) for d in array.shape)
            check_input_shape(tensor.spec, shape)
            if array.dtype != tensor.spec.dtype:
                raise InferenceError(f"input '{name}': expected {tensor.spec.dtype.name}, got {array.dtype.name}")
            if shape != tensor.shape:
                self.execution.set_input_shape(name, shape)
                tensor.shape = shape
            mapped = None if self.use_graph else self._mapped_address(array)
            if mapped is not None:
                in_place[name] = mapped
            else:
                staged = tensor.staging[: array.nbytes].view(array.dtype).reshape(shape)
                np.copyto(staged, array)
        outputs = [t for t in self.tensors.values() if not t.spec.is_input]
        for tensor in outputs:
            tensor.shape = self.execution.output_shape(tensor.spec.name)
        for name, tensor in self.tensors.items():
            self._point(tensor, in_place.get(name, tensor.device.pointer))
        if self.use_graph and self.calls >= 1:  # the first call runs plainly: TensorRT initialises lazily
            if self.graph is None:
                self.graph = self.cuda.capture(self.stream, lambda: self._enqueue(in_place))
            self.graph.launch(self.stream)
        else:
            self._enqueue(in_place)
        self.stream.synchronize()
        self.calls += 1
        return {t.spec.name: self._host_view(t).copy() for t in outputs}

    def _point(self, tensor: _Tensor, address: int) -> None:
        if tensor.address != address:
            self.execution.set_tensor_address(tensor.spec.name, address)
            tensor.address = address

    def _enqueue(self, in_place: Mapping[str, int]) -> None:
        for name, tensor in self.tensors.items():
            if tensor.spec.is_input and name not in in_place:
                self.cuda.copy_to_device(tensor.device.pointer, self._staged_bytes(tensor), self.stream)
        self.execution.enqueue(self.stream.handle)
        for tensor in self.tensors.values():
            if not tensor.spec.is_input:
                self.cuda.copy_to_host(self._staged_bytes(tensor), tensor.device.pointer, self.stream)

    def _staged_bytes(self, tensor: _Tensor) -> np.ndarray:
        assert tensor.shape is not None
        return tensor.staging[: int(np.prod(tensor.shape, dtype=np.int64)) * tensor.spec.dtype.itemsize]

    def _host_view(self, tensor: _Tensor) -> np.ndarray:
        assert tensor.shape is not None
        return self._staged_bytes(tensor).view(tensor.spec.dtype).reshape(tensor.shape)

    def close(self) -> None:
        if self.graph is not None:
            self.graph.destroy()
            self.graph = None
        for registered in self._mapped:
            registered.unregister()
        self._mapped.clear()
        self.stream.synchronize()
        for tensor in self.tensors.values():
            tensor.device.free()
        self.stream.destroy()
