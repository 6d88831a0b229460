"""Run a pipeline file's config with the runtime it asks for."""

from __future__ import annotations

import threading
from collections.abc import Callable

from edge_sdk.core.status import StatusCallback, ignore_status
from edge_sdk.engines.cache import EngineCache
from edge_sdk.profiles import DeviceProfile
from edge_sdk.sinks import check_sinks

from .config import PipelineConfig
from .loop import run_inline
from .metrics import RunSummary
from .prometheus import PrometheusExporter
from .runtime import PipelineRuntime
from .snapshot import RuntimeSnapshot


def run_pipeline(
    config: PipelineConfig,
    profile: DeviceProfile,
    cache: EngineCache | None = None,
    stop: threading.Event | None = None,
    on_status: StatusCallback = ignore_status,
    on_snapshot: Callable[[RuntimeSnapshot], None] | None = None,
) -> RunSummary:
    """Stage processes over shared memory (runtime.mode: processes, the default) or one loop (inline)."""
    check_sinks(config.sinks)
    if config.runtime.mode == "inline":
        return run_inline(config, profile, cache, stop=stop, on_status=on_status)
    if config.runtime.prometheus is None:
        return PipelineRuntime(config, profile, cache, on_status=on_status, on_snapshot=on_snapshot).run(stop)
    exporter = PrometheusExporter(config.runtime.prometheus.port, config.runtime.prometheus.address)

    def publish(snapshot: RuntimeSnapshot) -> None:
        exporter.update(snapshot)
        if on_snapshot:
            on_snapshot(snapshot)

    try:
        return PipelineRuntime(config, profile, cache, on_status=on_status, on_snapshot=publish).run(stop)
    finally:
        exporter.close()
