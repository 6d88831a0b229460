"""The pipelines a device runs: pipeline artifacts (`kind: pipeline`) of the active version, by name.

`start("people")` runs the artifact `people.yaml` of the active version (its relative paths, such as
`model: {path: classifier.onnx}`, resolve inside that version's folder) with `run_pipeline` on a
thread of the agent; the pipeline's own runtime starts its stage processes. A pipeline counts as
started once it reports a source connected or a stage started (or ended cleanly) within the start
timeout; if it fails first, `start` raises `PipelineStartError` with the reason. After an activation
the agent restarts the running pipelines on the new version, and a failure there rolls the
deployment back.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from edge_sdk.core.errors import ArtifactError, FleetError
from edge_sdk.core.status import StatusEvent, StatusKind
from edge_sdk.engines.cache import EngineCache
from edge_sdk.fleet.device.artifacts import ArtifactStore
from edge_sdk.pipeline.config import load_pipeline
from edge_sdk.pipeline.run import run_pipeline
from edge_sdk.pipeline.snapshot import RuntimeSnapshot
from edge_sdk.profiles import DeviceProfile

log = logging.getLogger(__name__)

DEFAULT_START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0
_STARTED = {StatusKind.SOURCE_CONNECTED, StatusKind.STAGE_STARTED}
_FAILED = {StatusKind.SOURCE_FAILED, StatusKind.STAGE_FAILED}


class PipelineStartError(FleetError):
    """A pipeline could not be found in the active version, or failed before it started."""

    reason = "pipeline-start"


@dataclass
class _Run:
    name: str
    version: int
    stop: threading.Event = field(default_factory=threading.Event)
    started: threading.Event = field(default_factory=threading.Event)
    ended: threading.Event = field(default_factory=threading.Event)
    error: str | None = None
    thread: threading.Thread | None = None
    forward: Callable[[str, StatusEvent], None] | None = None

    def on_status(self, event: StatusEvent) -> None:
        if self.forward is not None:
            try:
                self.forward(self.name, event)
            except Exception:
                log.exception("pipeline status listener failed")
        if event.kind in _STARTED:
            self.started.set()
        elif event.kind in _FAILED and not self.started.is_set():
            self.error = f"{event.kind.value} {event.subject}: {event.message}"


class PipelineSupervisor:
    """Starts, stops and watches the device's pipelines (thread-safe).

    `environment` is set in this process's environment before each pipeline starts, so its stage
    processes inherit it (the agent passes its results outbox this way: one agent per process).
    `on_snapshot(name, snapshot)` gets each running pipeline's runtime snapshot, about every half second,
    on the pipeline's thread; the inline runtime (`runtime.mode: inline`) makes none, so it is never
    called for such a pipeline.
    """

    def __init__(
        self,
        store: ArtifactStore,
        profile: Callable[[], DeviceProfile],
        cache: EngineCache | None = None,
        on_change: Callable[[], None] | None = None,
        on_status: Callable[[str, StatusEvent], None] | None = None,
        environment: dict[str, str] | None = None,
        on_snapshot: Callable[[str, RuntimeSnapshot], None] | None = None,
    ):
        self.store = store
        self._profile = profile
        self._cache = cache
        self._on_change = on_change
        self._on_status = on_status
        self._environment = dict(environment or {})
        self._on_snapshot = on_snapshot
        self._lock = threading.Lock()
        self._runs: dict[str, _Run] = {}

    def available(self, version: int | None = None) -> list[str]:
        """Pipeline names (artifact stems) in `version` (default: the active one)."""
        version = self.store.current_version() if version is None else version
        if version is None:
            return []
        try:
            manifest = self.store.manifest(version)
        except ArtifactError:
            return []
        return sorted(Path(a.name).stem for a in manifest.artifacts if a.kind == "pipeline")

    def running(self) -> list[str]:
        with self._lock:
            return sorted(name for name, run in self._runs.items() if not run.ended.is_set())

    def start(self, name: str, version: int | None = None, timeout: float = DEFAULT_START_TIMEOUT_S) -> None:
        """Run pipeline `name` of `version` (default: active); return once it started, else raise PipelineStartError."""

        version = self.store.current_version() if version is None else version
        if version is None:
            raise PipelineStartError(f"pipeline '{name}': no version is active")
        with self._lock:
            current = self._runs.get(name)
            if current is not None and not current.ended.is_set() and current.version == version:
                return
        self.stop(name)
        artifact = self._pipeline_artifact(name, version)
        try:
            config = load_pipeline(self.store.artifact_path(artifact, version))
        except Exception as exc:  # a pipeline file that does not load is a failed start, whatever broke
            raise PipelineStartError(f"pipeline '{name}' of version {version}: {exc}") from None
        run = _Run(name, version, forward=self._on_status)
        profile = self._profile()
        run.thread = threading.Thread(
            target=self._run, args=(run, config, profile), name=f"pipeline-{name}", daemon=True
        )
        with self._lock:
            self._runs[name] = run
        os.environ.update(self._environment)  # stage processes inherit it (e.g. the agent sink's outbox)
        run.thread.start()
        deadline = time.monotonic() + timeout
        while not (run.started.is_set() or run.ended.is_set() or run.error) and time.monotonic() < deadline:
            run.ended.wait(0.05)
        if run.error is not None:
            self.stop(name)
            raise PipelineStartError(f"pipeline '{name}' of version {version} failed to start: {run.error}")
        log.info("pipeline %s of version %d started", name, version)
        self._changed()

    def stop(self, name: str) -> bool:
        """Stop pipeline `name` (drains it); False when it was not running."""
        with self._lock:
            run = self._runs.pop(name, None)
        if run is None:
            return False
        run.stop.set()
        if run.thread is not None:
            run.thread.join(STOP_TIMEOUT_S)
        self._changed()
        return True

    def stop_all(self) -> None:
        for name in list(self._runs):
            self.stop(name)

    def restart_on(self, version: int, names: list[str], timeout: float = DEFAULT_START_TIMEOUT_S) -> None:
        """Stop every pipeline, then start `names` that exist in `version`; raise on the first that fails."""
        self.stop_all()
        present = set(self.available(version))
        for name in names:
            if name in present:
                self.start(name, version, timeout)

    # ---------------------------------------------------------------- internals
    def _pipeline_artifact(self, name: str, version: int) -> str:
        manifest = self.store.manifest(version)
        for artifact in manifest.artifacts:
            if artifact.kind == "pipeline" and Path(artifact.name).stem == name:
                return artifact.name
        raise PipelineStartError(
            f"pipeline '{name}': version {version} has no pipeline artifact of that name; "
            f"expected one of {', '.join(self.available(version)) or '(it has none)'}"
        )

    def _run(self, run: _Run, config: object, profile: DeviceProfile) -> None:
        on_snapshot = self._on_snapshot
        snapshots = None if on_snapshot is None else (lambda snapshot: on_snapshot(run.name, snapshot))
        try:
            summary = run_pipeline(
                config,  # type: ignore[arg-type]
                profile,
                self._cache,
                stop=run.stop,
                on_status=run.on_status,
                on_snapshot=snapshots,
            )
            log.info("pipeline %s ended after %d frames", run.name, summary.frames)
        except Exception as exc:  # a pipeline's failure is reported, never the agent's
            run.error = f"{type(exc).__name__}: {exc}"
            log.warning("pipeline %s failed: %s", run.name, run.error)
        finally:
            run.ended.set()
            self._changed()

    def _changed(self) -> None:
        if self._on_change is not None:
            try:
                self._on_change()
            except Exception:
                log.exception("pipeline change listener failed")
