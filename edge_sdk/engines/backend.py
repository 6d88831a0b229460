"""The builder role every backend fills, and the pair (builder, runner) that makes a backend."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edge_sdk.core.model_file import ModelFile
from edge_sdk.core.precision import Precision

from .runner import EngineRunner

if TYPE_CHECKING:
    from .calibration.settings import Calibration

BuildFacts = dict[str, Any]
"""What a build learned (providers used, node counts, layers on DLA, ...); kept in the manifest."""


class EngineBuilder(ABC):
    """ONNX model + profile options -> engine artifact files in a directory."""

    @abstractmethod
    def version(self) -> str:
        """Version of the backend library; raises BackendUnavailableError when it is not installed."""

    @abstractmethod
    def check(self, options: Any, precision: Precision) -> None:
        """Raise a clear error before any heavy work if these options cannot run on this host."""

    @abstractmethod
    def build(
        self, model: ModelFile, options: Any, precision: Precision, out_dir: Path, calibration: Calibration | None
    ) -> BuildFacts:
        """Write the engine artifact into `out_dir` and return what the build learned.

        `calibration` is given for int8 builds only: the data and settings to quantise with.
        """


RunnerFactory = Callable[[Path, Any, Precision], EngineRunner]


@dataclass(frozen=True)
class Backend:
    name: str
    builder: Callable[[], EngineBuilder]
    runner: RunnerFactory
    install_hint: str
