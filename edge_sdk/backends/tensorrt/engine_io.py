"""An engine's input and output tensors as the runner needs them: numpy dtypes from TensorRT's type
names, and the largest shape each may take, so buffers are allocated once per engine."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from edge_sdk.core.errors import ModelError

NUMPY_DTYPES: dict[str, np.dtype[Any]] = {
    "FLOAT": np.dtype(np.float32),
    "HALF": np.dtype(np.float16),
    "INT8": np.dtype(np.int8),
    "UINT8": np.dtype(np.uint8),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "BOOL": np.dtype(np.bool_),
}
"""tensorrt.DataType member names -> numpy. BF16, FP8 and INT4 have no numpy type: such an I/O tensor is
refused with its name (cast it in the model)."""


def numpy_dtype(trt_type_name: str, tensor: str) -> np.dtype[Any]:
    try:
        return NUMPY_DTYPES[trt_type_name]
    except KeyError:
        raise ModelError(
            f"engine tensor '{tensor}' is {trt_type_name}, which numpy cannot hold; cast it to float32 or float16 "
            "in the model"
        ) from None


@dataclass(frozen=True)
class TensorSpec:
    name: str
    is_input: bool
    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    """As the engine declares it: -1 on a dynamic axis."""
    max_shape: tuple[int, ...]
    """The largest shape it takes (the optimisation profile's max for an input)."""

    @property
    def static(self) -> bool:
        return all(dim >= 0 for dim in self.shape)

    @property
    def max_nbytes(self) -> int:
        return math.prod(self.max_shape) * self.dtype.itemsize


def check_input_shape(spec: TensorSpec, shape: Sequence[int]) -> None:
    """Refuse a shape outside what the engine was built for, before any CUDA call."""
    if len(shape) != len(spec.shape):
        raise ModelError(f"input '{spec.name}': expected {len(spec.shape)} dimensions, got shape {tuple(shape)}")
    for axis, (declared, largest, got) in enumerate(zip(spec.shape, spec.max_shape, shape, strict=True)):
        if declared >= 0 and got != declared:
            raise ModelError(f"input '{spec.name}': expected size {declared} on axis {axis}, got shape {tuple(shape)}")
        if declared < 0 and not 1 <= got <= largest:
            raise ModelError(
                f"input '{spec.name}': axis {axis} takes 1..{largest} (the engine's optimisation profile), got {got}"
            )


class EngineExecution(Protocol):
    """What the runner needs of an engine: TensorRT's IExecutionContext behind trt_execution.py, or any
    other enqueue-on-a-stream computation with named device tensors."""

    def tensors(self) -> list[TensorSpec]: ...

    def set_input_shape(self, name: str, shape: tuple[int, ...]) -> None: ...

    def output_shape(self, name: str) -> tuple[int, ...]:
        """The output's shape for the input shapes set last."""
        ...

    def set_tensor_address(self, name: str, pointer: int) -> None: ...

    def enqueue(self, stream_handle: int) -> None: ...
