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
    """One backend as the rest of the SDK sees it: how it builds and runs engines, and what it says about
    a profile's `engine:` options (each callable takes those options)."""

    name: str
    builder: Callable[[], EngineBuilder]
    runner: RunnerFactory
    install_hint: str
    runs_on_cpu: Callable[[Any], bool]
    """Whether inference stays on the host's CPU cores (the runtime then runs several single-threaded workers)."""
    exact_uint8_resize: Callable[[Any], bool]
    """Whether a folded resize may run on raw uint8 frames and match the host's cv2 resize."""
    devices: Callable[[Any], str]
    """What the options run on, for `profiles list`."""
    host_notes: Callable[[Any], list[str]]
    """What this host will skip or fall back from with these options, for `doctor`."""
