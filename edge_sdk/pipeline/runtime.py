"""The multi-process runtime: rings in shared memory, stage processes, a watchdog, live counters.

capture process per source --slot ids--> inference worker(s) (engine, post-process) --results-->
output process (cascade, sinks). The parent creates (and always unlinks) the rings, starts the stages,
restarts a crashed stage within its restart budget, and collects reports for --stats, Prometheus
and the run summary.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from edge_sdk.core.errors import EdgeSDKError
from edge_sdk.core.status import StatusCallback, StatusEvent, StatusKind, ignore_status
from edge_sdk.core.systemd_notify import SystemdNotifier
from edge_sdk.engines.cache import EngineCache
from edge_sdk.pipeline.engine_setup import PreparedModels, prepare_models
from edge_sdk.pipeline.slo import check_slo
from edge_sdk.profiles import DeviceProfile
from edge_sdk.sources.spec import BufferPolicy, SourceSpec

from .config import PipelineConfig
from .control import RunControl
from .frame_ring import FrameRing, RingLayout
from .memory_budget import SourceSlot, check_pipeline_memory, source_slot
from .message_socket import MessageListener, abstract_address, listening_socket
from .messages import StageFailure, StageReport
from .metrics import RunSummary
from .output_tally import OutputTally
from .shared_segments import new_run_token, remove_stale_segments, segment_name
from .snapshot import RuntimeSnapshot, StageView
from .stage_record import Stage as _Stage
from .stage_start import stage_context, start_stage_server, started_without_stop_signals
from .stages import (
    CapturePlan,
    DispatchPlan,
    InferencePlan,
    OutputPlan,
    RingHandle,
    StageChannels,
    run_capture,
    run_inference,
    run_output,
)
from .stages.common import GAVE_UP_EXIT
from .status_log import log_status
from .watchdog import RestartBudget
from .worker_layout import inference_layout

log = logging.getLogger(__name__)

SUPERVISE_SECONDS = 0.02
KILL_SECONDS = 1.0
"""What the stop timeout keeps back for killing and reaping the stages that did not drain."""
OUTPUT_OWNER = 2000
WORKER_OWNER = 1000


class PipelineRuntime:
    def __init__(
        self,
        config: PipelineConfig,
        profile: DeviceProfile,
        cache: EngineCache | None = None,
        on_status: StatusCallback = ignore_status,
        on_snapshot: Callable[[RuntimeSnapshot], None] | None = None,
        notifier: SystemdNotifier | None = None,
    ):
        self.config = config
        self.notifier = notifier or SystemdNotifier(None)
        """systemd's (`edge-sdk run` under a Type=notify unit): READY at the start, WATCHDOG from the loop."""
        self.profile = profile
        self.cache = cache
        self.on_status = on_status
        self.on_snapshot = on_snapshot
        self._ctx = stage_context()
        self._tally = OutputTally()
        self._rings: list[FrameRing] = []
        self._latest: list[bool] = []
        """Per ring: its source's buffer policy is latest (a frame overtaken by a newer one is dropped)."""
        self._stages: list[_Stage] = []
        self._failure: EdgeSDKError | None = None
        self._source_failures: dict[str, str] = {}
        self._causes: dict[int, StageFailure] = {}
        """The last StageFailure each stage process (by pid) sent before it exited."""
        self._source_names: list[str] = []
        self._counts: dict[str, dict[str, int]] = {}
        self._control: RunControl | None = None
        self._reports: MessageListener | None = None
        self._results: socket.socket | None = None
        self._token = new_run_token()
        """Names this run's segments and sockets."""

    # -- public --------------------------------------------------------------------------------------

    def run(self, stop: threading.Event | None = None) -> RunSummary:
        """Run until every source ends or `stop` is set; raise when a stage fails for good."""
        stop = stop or threading.Event()
        start_stage_server()  # its imports overlap the engine's loading (started already under `edge-sdk run`)
        stale = remove_stale_segments()
        if stale:
            log.warning("removed shared-memory segments left by a pipeline that died: %s", ", ".join(stale))
        slots = [self._source_slot(spec) for spec in self.config.sources]
        workers, _threads = inference_layout(self.config.runtime, self.profile)
        check_pipeline_memory(self.config, [slot.size for slot in slots], workers=workers)
        models = prepare_models(self.config, self.profile, self.cache)
        check_slo(models.primary, models.engine_input, self.config.runtime.latency_slo_ms)
        self.on_status(StatusEvent(StatusKind.PIPELINE_STARTED, self.config.name))
        self.notifier.ready(f"pipeline {self.config.name} started")
        started = time.monotonic()
        try:
            channels = self._open_channels()
            handles = self._create_rings(slots)
            self._stages = self._plan_stages(models, handles, channels)
            for stage in self._stages:
                if stop.is_set():
                    break
                self._start(stage)
            self._supervise(stop, started)
        finally:
            self._shutdown()
        if self._failure:
            raise self._failure
        return self._tally.summary(
            self._counts,
            source_failures=self._source_failures,
            restarts={s.view.name: s.view.restarts for s in self._stages if s.view.restarts},
            engine=(models.primary.built, models.primary.seconds),
            wall=time.monotonic() - started,
        )

    # -- set-up --------------------------------------------------------------------------------------

    def _open_channels(self) -> StageChannels:
        token = self._token
        self._control = RunControl.create(token)
        reports = abstract_address(segment_name(token, "reports"))
        results = abstract_address(segment_name(token, "results"))
        self._reports = MessageListener(listening_socket(reports))
        self._results = listening_socket(results)
        level = logging.getLogger("edge_sdk").getEffectiveLevel()
        return StageChannels(self._control.handle, results, reports, dict(os.environ), level)

    def _create_rings(self, slots: list[SourceSlot]) -> list[RingHandle]:
        handles = []
        for index, slot in enumerate(slots):
            width, height = slot.size
            layout = RingLayout(self.config.runtime.ring_slots, height, width)
            ring = FrameRing.create(layout, self._token, index)
            self._rings.append(ring)
            self._latest.append(slot.policy == BufferPolicy.LATEST)
            handles.append(RingHandle(ring.name, layout, slot.policy, slot.live))
        return handles

    def _source_slot(self, spec: SourceSpec) -> SourceSlot:
        slot = source_slot(spec, self.config.base_dir, self.config.runtime.max_frame_size)
        self._source_names.append(slot.name)
        return slot

    def _plan_stages(self, models: PreparedModels, handles: list[RingHandle], channels: StageChannels) -> list[_Stage]:
        config, runtime = self.config, self.config.runtime
        every = runtime.stats_interval_s
        stages = []
        for index, spec in enumerate(config.sources):
            capture = CapturePlan(index, index, spec, config.base_dir, handles[index], channels, -1, every)
            stages.append(self._stage(f"capture:{self._source_names[index]}", "capture", index, run_capture, capture))
        names = tuple(self._source_names)
        workers, threads = inference_layout(runtime, self.profile)
        live = frozenset(name for name, handle in zip(names, handles, strict=True) if handle.live)
        for worker in range(workers):
            inference = InferencePlan(
                worker=worker,
                owner_id=WORKER_OWNER + worker,
                engine=models.primary,
                threads=threads,
                input_name=models.input_name,
                preprocess=models.preprocess,
                postprocess=config.postprocess,
                source_names=names,
                rings=tuple(handles),
                channels=channels,
                batching=runtime,
                report_seconds=every,
                workers=workers,
                fallback=models.fallback,
                dispatch=DispatchPlan(config, self.profile, self.cache.root if self.cache else None, workers, live)
                if config.offload is not None
                else None,
            )
            stages.append(
                self._stage(f"inference:{worker}", "inference", WORKER_OWNER + worker, run_inference, inference)
            )
        assert self._results is not None
        output = OutputPlan(
            OUTPUT_OWNER, config.name, config.cascade, models.cascade, tuple(config.sinks), tuple(handles), channels,
            self._results, every, late_results=config.offload is not None,
        )  # fmt: skip
        stages.append(self._stage("output", "output", OUTPUT_OWNER, run_output, output))
        return stages

    def _stage(self, name: str, kind: str, owner: int, target: Callable[[Any], None], plan: Any) -> _Stage:
        budget = RestartBudget(self.config.runtime.max_restarts, self.config.runtime.restart_window_s)
        return _Stage(StageView(name, kind), owner, target, plan, budget)

    def _start(self, stage: _Stage) -> None:
        if stage.process is not None:  # a restart: the old process is dead and reaped; free its descriptor
            stage.process.close()
        stage.process = self._ctx.Process(target=stage.target, args=(stage.plan,), name=f"edge-sdk {stage.view.name}")
        with started_without_stop_signals():
            stage.process.start()
        stage.finished = False
        stage.view.pid, stage.view.state = stage.process.pid, "starting"

    # -- supervision ---------------------------------------------------------------------------------

    def _supervise(self, stop: threading.Event, started: float) -> None:
        """The parent's loop. It waits only on its own socket, with a timeout, and polls the stage
        processes: nothing a dead stage held can block it."""
        assert self._control is not None
        control = self._control
        grace = max(0.5, self.config.runtime.stop_timeout_s - KILL_SECONDS)
        stopping_since: float | None = None
        next_snapshot = time.monotonic()
        while True:
            self._receive_reports(SUPERVISE_SECONDS)
            self.notifier.watchdog_if_due()
            if (stop.is_set() or self._failure) and stopping_since is None:
                stopping_since = time.monotonic()
                self.notifier.stopping(f"pipeline {self.config.name} draining")
                control.stop.set()
                self._kill_starting()
            for stage in self._stages:
                if stage.process is not None and not stage.finished and not stage.process.is_alive():
                    self._on_exit(stage, stopping=stopping_since is not None or stop.is_set())
            if all(s.finished for s in self._stages if s.view.kind == "capture"):
                control.captures_done.set()
            if all(s.finished for s in self._stages if s.view.kind == "inference"):
                if stopping_since is None and self._frames_ready():
                    self._reopen_inference()  # frames came back to a ring after the last worker left
                else:
                    control.workers_done.set()
            if all(s.finished or s.process is None for s in self._stages):
                break
            if stopping_since is not None and time.monotonic() - stopping_since > grace:
                log.warning("stages did not drain within %.1f s of the stop; killing them", grace)
                break
            if self.on_snapshot and time.monotonic() >= next_snapshot:
                self.on_snapshot(self.snapshot(time.monotonic() - started))
                next_snapshot = time.monotonic() + 0.5
        self._receive_reports(0)

    def _kill_starting(self) -> None:
        """On stop, a stage still importing or loading its engine has nothing to drain: waiting for
        its start-up would only delay the stop."""
        for stage in self._stages:
            if stage.view.state == "starting" and stage.process is not None and stage.process.is_alive():
                stage.process.kill()

    def _on_exit(self, stage: _Stage, stopping: bool) -> None:
        code = stage.process.exitcode
        self._receive_reports(0)  # what it said before it died
        cause = self._causes.pop(stage.process.pid, None)
        redone, freed = self._recover(stage.owner_id, sent=stage.view.kind == "output", clean=code == 0)
        if code == 0 or stopping:
            stage.finished, stage.view.state = True, "done" if code == 0 else f"exit {code}"
            return
        reason = f"exit code {code}" + (f" ({cause.message})" if cause else "")
        if cause and cause.details:
            log.debug("stage %s: %s", stage.view.name, cause.details)
        if code == GAVE_UP_EXIT or (cause and cause.final):
            self._gave_up(stage, cause.message if cause else reason)
            return
        if stage.budget.allow():
            stage.view.restarts += 1
            self._prepare_restart(stage)
            self._emit(
                StatusEvent(
                    StatusKind.STAGE_RESTARTED,
                    stage.view.name,
                    f"{reason}; restart {stage.budget.used}/{stage.budget.max_restarts} within "
                    f"{stage.budget.window_seconds:.0f} s; {redone} frame(s) to redo, {freed} slot(s) freed",
                    data={"exit_code": code, "restarts": stage.view.restarts},
                )
            )
            if stage.view.kind == "output" and self._frames_ready():  # before it can read workers_done
                self._reopen_inference()
            self._start(stage)
            return
        stage.finished, stage.view.state = True, f"failed ({code})"
        message = (
            f"stage {stage.view.name} crashed ({reason}) after {stage.view.restarts} restart(s), "
            f"more than runtime.max_restarts={stage.budget.max_restarts} within {stage.budget.window_seconds:.0f} s; "
            "pipeline stopped"
        )
        self._emit(StatusEvent(StatusKind.STAGE_FAILED, stage.view.name, message, data={"exit_code": code}))
        self._failure = self._failure or EdgeSDKError(message)

    def _recover(self, owner: int, sent: bool, clean: bool) -> tuple[int, int]:
        """Give the frames a stage held when it ended back to the rings: (frames to redo, slots freed)."""
        redone = freed = 0
        for ring, latest in zip(self._rings, self._latest, strict=True):
            redo, free = ring.recover(owner, sent, latest=latest, clean=clean)
            redone, freed = redone + redo, freed + free
        return redone, freed

    def _prepare_restart(self, stage: _Stage) -> None:
        if stage.view.kind == "capture":  # continue after the last frame it delivered to the ring
            stage.plan = dataclasses.replace(stage.plan, resume_after=self._rings[stage.owner_id].last_seq())
        if stage.view.kind == "output":  # keep what the sinks wrote before the crash
            stage.plan = stage.plan.after_crash(stage.view.restarts)

    def _frames_ready(self) -> bool:
        return any(ring.states()["ready"] for ring in self._rings)

    def _reopen_inference(self) -> None:
        """Frames went back to the rings after every worker had finished (a stage died while the
        pipeline drained, and its frames are to be redone): start the workers again."""
        assert self._control is not None
        finished = [s for s in self._stages if s.view.kind == "inference" and s.view.state == "done"]
        if finished:
            self._control.workers_done.clear()
            for stage in finished:
                self._start(stage)

    def _gave_up(self, stage: _Stage, message: str) -> None:
        """A stage failed for a reason a restart cannot fix: a source ends (the others go on), any
        other stage stops the pipeline."""
        stage.finished, stage.view.state = True, "failed"
        if stage.view.kind == "capture":
            name = stage.view.name.removeprefix("capture:")
            self._source_failures[name] = message
            self._emit(StatusEvent(StatusKind.SOURCE_FAILED, name, message))
            return
        self._emit(StatusEvent(StatusKind.STAGE_FAILED, stage.view.name, message))
        self._failure = self._failure or EdgeSDKError(message)

    def _receive_reports(self, timeout: float) -> None:
        assert self._reports is not None
        for item in self._reports.receive(timeout):
            if isinstance(item, StatusEvent):
                self._emit(item)
            elif isinstance(item, StageReport):
                self._record(item)
            elif isinstance(item, StageFailure):
                self._causes[item.pid] = item

    def _record(self, report: StageReport) -> None:
        for stage in self._stages:
            if stage.view.name == report.stage or (stage.view.pid == report.pid):
                stage.view.update(report)
                break
        if report.stage == "output":
            self._tally.record(report)

    def _emit(self, event: StatusEvent) -> None:
        log_status(event)
        self.on_status(event)

    # -- reporting -----------------------------------------------------------------------------------

    def snapshot(self, elapsed: float) -> RuntimeSnapshot:
        rings = dict(zip(self._source_names, self._rings, strict=True))
        return RuntimeSnapshot.of([stage.view for stage in self._stages], rings, self._tally.recent, elapsed)

    def _shutdown(self) -> None:
        """Kill what is still running (stages ignore SIGTERM: stopping them is the runtime's job),
        reap it, then release every ring, flag and socket of the run."""
        for stage in self._stages:
            if stage.process is not None and stage.process.is_alive():
                stage.process.kill()
        deadline = time.monotonic() + KILL_SECONDS
        for stage in self._stages:
            if stage.process is not None and stage.process.pid is not None:  # not one whose start() raised
                stage.process.join(timeout=max(0.0, deadline - time.monotonic()))
                if not stage.process.is_alive():
                    stage.process.close()
        if self._reports is not None:
            self._receive_reports(0)
        self._counts = {
            name: {"delivered": ring.delivered, "dropped": ring.dropped, "skipped": ring.skipped}
            for name, ring in zip(self._source_names, self._rings, strict=False)
        }
        for ring in self._rings:
            ring.close()
        self._rings, self._latest = [], []
        for closeable in (self._reports, self._results, self._control):
            if closeable is not None:
                closeable.close()
        self._reports = self._results = self._control = None
