"""The output stage: post-processing, the cascade and sinks, then the slot is free again."""

from __future__ import annotations

import dataclasses
import queue
import time
from dataclasses import dataclass
from typing import Any

from edge_sdk.engines.engine import PreparedEngine
from edge_sdk.engines.runner import EngineRunner
from edge_sdk.postprocess import PostprocessSpec, build_postprocessor
from edge_sdk.postprocess.cascade import Cascade, CascadeSpec, NoCascade
from edge_sdk.results import Result
from edge_sdk.sinks import SinkFanout, SinkSpec, create_sink
from edge_sdk.status import StatusEvent, StatusKind

from ..frame_ring import SlotInfo, monotonic
from ..messages import InferenceDone
from .common import POLL_SECONDS, Reporter, RingHandle, StageChannels, attach_rings, child_setup
from .reorder import Reorder


@dataclass(frozen=True)
class OutputPlan:
    owner_id: int
    pipeline_name: str
    postprocess: PostprocessSpec
    cascade: CascadeSpec | None
    cascade_engine: PreparedEngine | None
    sinks: tuple[SinkSpec, ...]
    rings: tuple[RingHandle, ...]
    channels: StageChannels
    workers: int
    report_seconds: float


def run_output(plan: OutputPlan) -> None:
    parent_alive = child_setup()
    output = _Output(plan)
    channels = plan.channels
    reorder = Reorder(
        [ring.policy for ring in plan.rings],
        plan.workers,
        oldest_pending=lambda index: output.rings[index].oldest_pending_seq(),
    )
    try:
        while parent_alive():
            workers_done = channels.workers_done.is_set()  # read before get(): nothing can follow it
            try:
                ready, stale = reorder.push(channels.results.get(timeout=POLL_SECONDS))
            except queue.Empty:
                if workers_done:
                    break
                ready, stale = reorder.due(), []
            for done in stale:
                output.drop(done)
            for done in ready:
                output.deliver(done)
            output.reporter.tick()
        for done in reorder.flush():
            output.deliver(done)
    finally:
        output.close()


class _Output:
    """Post-process, sinks, slot release, and the counters the run summary needs."""

    def __init__(self, plan: OutputPlan):
        self.rings = attach_rings(plan.rings)
        self.reports = plan.channels.reports
        self.reporter = Reporter("output", self.reports, plan.report_seconds, extra=self._report_extra)
        self.postprocess = build_postprocessor(plan.postprocess)
        self.cascade: Cascade | NoCascade = NoCascade()
        self._cascade_runner: EngineRunner | None = None
        if plan.cascade is not None and plan.cascade_engine is not None:
            self._cascade_runner = plan.cascade_engine.open()
            self._cascade_runner.activate()
            self.cascade = Cascade(plan.cascade, self._cascade_runner)
        self.sinks = SinkFanout([create_sink(spec, plan.pipeline_name) for spec in plan.sinks])
        self.sinks.open()
        self.reported_failures: set[str] = set()
        self.timing_sums: dict[str, float] = {}
        self.first_result_at: float | None = None
        self.last_result_at: float | None = None

    def deliver(self, done: InferenceDone) -> None:
        started = time.perf_counter()
        ring = self.rings[done.source_index]
        image = ring.frame(SlotInfo(done.slot, done.frame.index, done.frame.height, done.frame.width, done.captured_at))
        try:
            result: Result = self.postprocess(done.outputs, done.frame, done.geometry)
            result = self.cascade(result, image)
            timings = dict(done.timings_ms, postprocess=(time.perf_counter() - started) * 1000)
            timings["total"] = (monotonic() - done.captured_at) * 1000
            result = dataclasses.replace(result, timings_ms=timings)
            self.sinks.write(result, image)
        except BaseException:
            ring.release(done.slot)
            raise
        ring.release(done.slot, delivered=True)
        for name, value in timings.items():
            self.timing_sums[name] = self.timing_sums.get(name, 0.0) + value
        now = time.time()
        self.first_result_at = self.first_result_at or now
        self.last_result_at = now
        self.reporter.frames += 1
        self.reporter.latencies.append((monotonic() - done.captured_at) * 1000)
        self.reporter.busy += time.perf_counter() - started
        if len(self.sinks.failures) > len(self.reported_failures):
            for name, problem in self.sinks.failures.items():
                if name not in self.reported_failures:
                    self.reported_failures.add(name)
                    self.reports.put(StatusEvent(StatusKind.SINK_FAILED, name, problem))

    def _report_extra(self) -> dict[str, Any]:
        return {
            "sink_failures": dict(self.sinks.failures),
            "timing_sums": dict(self.timing_sums),
            "first_result_at": self.first_result_at,
            "last_result_at": self.last_result_at,
        }

    def drop(self, done: InferenceDone) -> None:
        """A live frame overtaken by a newer one: free its slot and count it as dropped."""
        ring = self.rings[done.source_index]
        ring.release(done.slot)
        ring.count_dropped()

    def close(self) -> None:
        self.sinks.close()
        if self._cascade_runner is not None:
            self._cascade_runner.deactivate()
        self.reporter.tick(force=True)
        for ring in self.rings:
            ring.close()
