"""TensorRT's ICudaEngine + IExecutionContext as the runner's EngineExecution (engine_io.py), with the
name-based I/O API (TensorRT 8.5 and later): num_io_tensors, get_tensor_name/mode/dtype/shape,
set_input_shape, set_tensor_address, execute_async_v3."""

from __future__ import annotations

from typing import Any

from edge_sdk.core.errors import InferenceError

from .engine_io import TensorSpec, numpy_dtype

PROFILE_INDEX = 0
"""The engine has one optimisation profile (build_plan.py adds at most one)."""


class TensorRTExecution:
    def __init__(self, trt: Any, engine: Any):
        self.trt = trt
        self.engine = engine
        self.context = engine.create_execution_context()
        if self.context is None:
            raise InferenceError("TensorRT could not create an execution context (out of device memory?)")

    def tensors(self) -> list[TensorSpec]:
        specs = []
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        inputs = [n for n in names if self.engine.get_tensor_mode(n) == self.trt.TensorIOMode.INPUT]
        for name in inputs:  # the largest input shapes first: outputs' largest shapes follow from them
            shape = tuple(self.engine.get_tensor_shape(name))
            largest = shape
            if any(dim < 0 for dim in shape):
                largest = tuple(self.engine.get_tensor_profile_shape(name, PROFILE_INDEX)[2])
                self.set_input_shape(name, largest)
            specs.append(TensorSpec(name, True, self._dtype(name), shape, largest))
        for name in names:
            if name not in inputs:
                shape = tuple(self.engine.get_tensor_shape(name))
                specs.append(TensorSpec(name, False, self._dtype(name), shape, self.output_shape(name)))
        return specs

    def _dtype(self, name: str) -> Any:
        return numpy_dtype(self.engine.get_tensor_dtype(name).name, name)

    def set_input_shape(self, name: str, shape: tuple[int, ...]) -> None:
        if not self.context.set_input_shape(name, shape):
            raise InferenceError(f"TensorRT refused shape {shape} for input '{name}'")

    def output_shape(self, name: str) -> tuple[int, ...]:
        shape = tuple(self.context.get_tensor_shape(name))
        if any(dim < 0 for dim in shape):
            raise InferenceError(f"TensorRT cannot tell the shape of output '{name}' ({shape}) from the inputs")
        return shape

    def set_tensor_address(self, name: str, pointer: int) -> None:
        if not self.context.set_tensor_address(name, pointer):
            raise InferenceError(f"TensorRT refused the device address of tensor '{name}'")

    def enqueue(self, stream_handle: int) -> None:
        if not self.context.execute_async_v3(stream_handle):
            raise InferenceError("TensorRT's execute_async_v3 failed (its log says why)")
