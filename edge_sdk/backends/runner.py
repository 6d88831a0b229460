"""The runner role every backend fills: artifact -> infer(inputs) -> outputs."""

from __future__ import annotations

from abc import ABC, abstractmethod
from types import TracebackType

import numpy as np

from edge_sdk.core.errors import ModelError
from edge_sdk.core.tensor_meta import TensorMeta


class EngineRunner(ABC):
    """Activate, infer, deactivate; usable as a context manager.

    `infer` checks the inputs against the engine's metadata before calling the backend hook, so a
    wrong frame size or dtype is reported as 'expected X, got Y' instead of a backend stack trace.
    """

    def __enter__(self) -> EngineRunner:
        self.activate()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.deactivate()

    @abstractmethod
    def activate(self) -> None: ...

    @abstractmethod
    def deactivate(self) -> None: ...

    @property
    @abstractmethod
    def inputs(self) -> tuple[TensorMeta, ...]: ...

    @property
    @abstractmethod
    def outputs(self) -> tuple[TensorMeta, ...]: ...

    def register_host_memory(self, array: np.ndarray) -> bool:
        """Offer host memory that inputs will lie in (a pipeline's frame ring) for the engine to read in
        place, without a copy (the tensorrt backend's zero_copy_frames on a Jetson's shared DRAM). False:
        this runner copies inputs as usual. Call after activate."""
        return False

    def infer(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        expected = {meta.name: meta for meta in self.inputs}
        if set(feed) != set(expected):
            raise ModelError(f"expected inputs {sorted(expected)}, got {sorted(feed)}")
        for name, array in feed.items():
            problem = expected[name].accepts(array)
            if problem:
                raise ModelError(problem)
        return self._infer(feed)

    @abstractmethod
    def _infer(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]: ...
