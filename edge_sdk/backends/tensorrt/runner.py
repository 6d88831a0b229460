"""Run: a TensorRT plan -> infer(inputs) -> outputs, through the CUDA binding the profile names.

The header is checked against this host before the plan is deserialised (engine_file.py); the engine's
inputs and outputs come from the header, so a runner describes itself without TensorRT loaded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from edge_sdk.core.errors import EngineMismatchError, InferenceError
from edge_sdk.core.host import HostProbe
from edge_sdk.core.precision import Precision
from edge_sdk.core.tensor_meta import TensorMeta

from ..runner import EngineRunner
from .build_log import make_logger
from .cuda_runtime import CudaRuntime, open_cuda
from .device_io import DeviceIO
from .engine_file import PLAN, EngineHeader, EngineTarget, target_mismatch
from .library import import_tensorrt
from .options import TensorRTOptions
from .trt_execution import TensorRTExecution


class TensorRTRunner(EngineRunner):
    def __init__(self, directory: Path, options: TensorRTOptions, precision: Precision):
        self.directory = directory
        self.options = options
        self.header = EngineHeader.read(directory)
        self._io: DeviceIO | None = None
        self._engine: Any = None

    @property
    def inputs(self) -> tuple[TensorMeta, ...]:
        return self.header.inputs

    @property
    def outputs(self) -> tuple[TensorMeta, ...]:
        return self.header.outputs

    def activate(self) -> None:
        if self._io is not None:
            return
        trt = import_tensorrt()
        cuda = open_cuda(self.options.cuda, self.options.device_id)
        if problem := stale_reason(self.header, trt, cuda, self.options):
            raise EngineMismatchError(problem)
        logger = make_logger(trt)
        runtime = trt.Runtime(logger)
        if self.options.dla_core is not None:
            runtime.DLA_core = self.options.dla_core  # before deserialising: the plan runs on that core
        engine = runtime.deserialize_cuda_engine((self.directory / PLAN).read_bytes())
        if engine is None:
            raise InferenceError(
                f"TensorRT could not deserialise {self.directory / PLAN}: {'; '.join(logger.errors()) or 'no reason given'}"
            )
        self._engine = engine
        self._io = DeviceIO(cuda, TensorRTExecution(trt, engine), cuda_graph=self.options.cuda_graph)

    def register_host_memory(self, array: np.ndarray) -> bool:
        """With zero_copy_frames, map `array` (a frame ring's shared memory) so inputs inside it reach the
        engine without a copy; False when the option is off."""
        if not self.options.zero_copy_frames:
            return False
        if self._io is None:
            raise InferenceError("activate the runner before registering host memory")
        self._io.register_host_memory(array)
        return True

    def deactivate(self) -> None:
        if self._io is not None:
            self._io.close()
            self._io = None
        self._engine = None

    def _infer(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._io is None:
            self.activate()
        assert self._io is not None
        return self._io.run(feed)


def current_target(trt: Any, cuda: CudaRuntime, options: TensorRTOptions) -> EngineTarget:
    device = cuda.device()
    return EngineTarget(
        str(trt.__version__),
        device.name,
        f"{device.compute_capability[0]}.{device.compute_capability[1]}",
        options.dla_core,
        HostProbe().facts().device_tree_model,
    )


def stale_reason(header: EngineHeader, trt: Any, cuda: CudaRuntime, options: TensorRTOptions) -> str | None:
    return target_mismatch(header.target, current_target(trt, cuda, options))


def cached_engine_problem(directory: Path, options: TensorRTOptions) -> str | None:
    """Why the engine in `directory` cannot load on this host (the backend's `stale` hook), or None."""
    header = EngineHeader.read(directory)
    return stale_reason(header, import_tensorrt(), open_cuda(options.cuda, options.device_id), options)
