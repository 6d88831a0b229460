"""What a backend is: the builder role it fills, the options a profile gives it, and the one object
(`Backend`) that describes it to the rest of the SDK."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from edge_sdk.core.model_file import ModelFile
from edge_sdk.core.precision import Precision

from .runner import EngineRunner

if TYPE_CHECKING:
    from .calibration.settings import Calibration
    from .int8.quantizer import Quantizer

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


class BackendOptions(BaseModel):
    """A profile's `engine:` block: `backend:` names the backend, the rest are that backend's options.
    Each backend's options model subclasses this with `backend: Literal["<its name>"]`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: str


@dataclass(frozen=True)
class Package:
    """A Python package a backend needs, for `doctor`'s table."""

    distributions: tuple[str, ...]
    """Distribution names that provide it (any of them)."""
    module: str
    """Its import name."""
    purpose: str
    install: str


@dataclass(frozen=True)
class Backend:
    """One backend, all the rest of the SDK knows of it. The profile's `engine:` union, `doctor`,
    `profiles list`, the runtime's worker layout and the INT8 toolkit all read it from the registry.
    The callables that describe options take the profile's `engine:` options (an instance of `options`)."""

    name: str
    options: type[BackendOptions]
    """The model of a profile's `engine:` block for this backend."""
    builder: Callable[[], EngineBuilder]
    runner: RunnerFactory
    install_hint: str
    precisions: frozenset[Precision]
    """What it can build at all; a profile listing another precision for it is refused when it loads."""
    runs_on_cpu: Callable[[Any], bool]
    """The runtime's layout hint: whether inference stays on the host's CPU cores (the runtime then runs
    several single-threaded workers) or on an accelerator (a few workers batching for it)."""
    exact_uint8_resize: Callable[[Any], bool]
    """Whether a folded resize may run on raw uint8 frames and match the host's cv2 resize."""
    devices: Callable[[Any], str]
    """What the options run on, for `profiles list`."""
    host_notes: Callable[[Any], list[str]]
    """What this host will skip or fall back from with these options, for `doctor`."""
    worker_options: Callable[[Any, int | None, bool], Any] = lambda options, threads, share_cpu: options
    """The options one inference worker runs with: (options, threads per inference or None for the
    profile's, whether other stage processes share the CPU) -> options. The same engine either way."""
    int8: Quantizer | None = None
    """The INT8 hook the toolkit (backends/int8/) quantises through; None: no int8 builds."""
    packages: tuple[Package, ...] = ()
    """The Python packages it needs, for `doctor`."""
    doctor_facts: Callable[[], dict[str, str]] = dict
    """What `doctor` reports of it on this host (e.g. each accelerator library: usable, or why not)."""
    unavailable: Callable[[Any], str | None] = lambda options: None
    """Why it cannot run these options on this host (its library or device is missing), in one line, or
    None. A profile with a `fallback_engine:` then uses that instead (profiles/route.py)."""
    describe_facts: Callable[[dict[str, Any]], list[str]] = lambda facts: []
    """Lines for people of what a build learned (its facts in the manifest), for `build` and `cache inspect`."""
    stale: Callable[[Path, Any], str | None] = lambda directory, options: None
    """Why a cached artifact (its folder) cannot load on this host although its key matched (e.g. a TensorRT
    plan built for another GPU), or None; prepare_engine then rebuilds it with one log line."""
