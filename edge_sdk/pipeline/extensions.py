"""Pipeline extensions: a section of the pipeline file that a package outside the SDK owns, and the
`FrameDispatch` it runs the pipeline's frames through.

cloud_offload is one (the `offload:` section): it builds on the SDK, and the SDK never imports it. It
is found through the `edge_sdk.pipeline_extensions` entry point named after its section (pyproject's
`[project.entry-points]`), or registered by `register_extension` (tests, embedding code).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from edge_sdk.core.errors import ConfigError
from edge_sdk.core.status import StatusCallback

from .dispatch import FrameDispatch, LocalDispatch
from .frame_steps import FrameInference

if TYPE_CHECKING:
    from edge_sdk.profiles import DeviceProfile

    from .config import PipelineConfig

ENTRY_POINT_GROUP = "edge_sdk.pipeline_extensions"


@dataclass(frozen=True)
class DispatchContext:
    """What an extension's dispatch is made from, in the process that infers (an inference worker,
    or the inline loop)."""

    config: PipelineConfig
    options: Any
    """The section as the extension validated it."""
    profile: DeviceProfile
    cache_dir: Path | None
    local: FrameInference
    """The pipeline's own engine: what a frame falls back to."""
    worker: int
    """The inference worker's number (0 inline): one connection per worker."""
    on_status: StatusCallback
    workers: int = 1
    """How many inference workers share the sources' frames (this one among them)."""
    live_sources: frozenset[str] = frozenset()
    """The sources whose frames arrive in real time (cameras, streams), not read ahead (files)."""


class PipelineExtension(Protocol):
    section: str
    """The pipeline file's key it owns."""

    def validate(self, value: Any) -> Any:
        """The section's value checked (raise ValueError or pydantic's ValidationError); picklable."""
        ...

    def dispatch(self, context: DispatchContext) -> FrameDispatch: ...


_registered: dict[str, PipelineExtension] = {}


def register_extension(extension: PipelineExtension) -> None:
    _registered[extension.section] = extension


def pipeline_extension(section: str) -> PipelineExtension:
    """The extension owning `section`; ConfigError when none is installed."""
    if section not in _registered:
        found = [point for point in entry_points(group=ENTRY_POINT_GROUP) if point.name == section]
        if not found:
            raise ConfigError(
                f"the pipeline's '{section}:' section needs the package that provides it, and none is installed "
                f"(for offload: pip install edge-sdk[offload])"
            )
        extension: PipelineExtension = found[0].load()
        _registered[section] = extension
    return _registered[section]


def make_dispatch(
    config: PipelineConfig,
    profile: DeviceProfile,
    cache_dir: Path | None,
    local: FrameInference,
    worker: int,
    on_status: StatusCallback,
    workers: int = 1,
    live_sources: frozenset[str] = frozenset(),
) -> FrameDispatch:
    """The pipeline's dispatch: its extension's when its file has an `offload:` section, else local."""
    if config.offload is None:
        return LocalDispatch(local)
    context = DispatchContext(
        config, config.offload, profile, cache_dir, local, worker, on_status, workers, live_sources
    )
    return pipeline_extension("offload").dispatch(context)
