"""The sink role: results (and their frames) out."""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from edge_sdk.results import Result


class Sink(ABC):
    name: str

    def open(self) -> None:  # noqa: B027 - most sinks need no set-up
        """Acquire files or connections; called once before the first write."""

    @abstractmethod
    def write(self, result: Result, image: np.ndarray) -> None:
        """Called once per frame with its result and its BGR pixels."""

    def close(self) -> None:  # noqa: B027
        """Flush and release; called once, also after a failure."""
