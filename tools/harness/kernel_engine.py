"""A CUDA kernel standing in for a TensorRT engine in the tests of the runner's CUDA half (device_io.py):
it has named device tensors, takes input shapes per call and enqueues its work on the runner's stream,
as TensorRT's execute_async_v3 does. It computes y = 2x + 1 elementwise (CuPy's RawKernel, compiled
by NVRTC), so outputs can be checked bit-exact. It is not TensorRT and claims nothing about TensorRT."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from edge_sdk.backends.tensorrt.engine_io import TensorSpec

SOURCE = r"""
extern "C" __global__ void affine(const float* x, float* y, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * 2.0f + 1.0f;
}
extern "C" __global__ void widen(const unsigned char* x, float* y, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = (float)x[i];
}
"""


def expected(array: np.ndarray) -> np.ndarray:
    if array.dtype == np.uint8:
        return array.astype(np.float32)
    return array * np.float32(2) + np.float32(1)


class KernelEngine:
    """One input 'input' and one output 'output' of the same shape; `dynamic` makes axis 0 a batch of
    1..max_batch, else the shape is static. uint8 input -> float32 copy (frames), float32 -> 2x+1."""

    def __init__(self, shape: tuple[int, ...], dtype: Any = np.float32, dynamic: bool = False, max_batch: int = 4):
        import cupy

        self.cupy = cupy
        self.dtype = np.dtype(dtype)
        self.kernel = cupy.RawModule(code=SOURCE).get_function("widen" if self.dtype == np.uint8 else "affine")
        declared = (-1, *shape[1:]) if dynamic else shape
        largest = (max_batch, *shape[1:]) if dynamic else shape
        self.specs = [
            TensorSpec("input", True, self.dtype, declared, largest),
            TensorSpec("output", False, np.dtype(np.float32), declared, largest),
        ]
        self.shape = largest
        self.addresses: dict[str, int] = {}
        self.enqueued = 0

    def tensors(self) -> list[TensorSpec]:
        return self.specs

    def set_input_shape(self, name: str, shape: tuple[int, ...]) -> None:
        self.shape = shape

    def output_shape(self, name: str) -> tuple[int, ...]:
        return self.shape

    def set_tensor_address(self, name: str, pointer: int) -> None:
        self.addresses[name] = pointer

    def enqueue(self, stream_handle: int) -> None:
        count = math.prod(self.shape)
        with self.cupy.cuda.ExternalStream(stream_handle):
            self.kernel(
                ((count + 255) // 256,),
                (256,),
                (np.uint64(self.addresses["input"]), np.uint64(self.addresses["output"]), np.int64(count)),
            )
        self.enqueued += 1
