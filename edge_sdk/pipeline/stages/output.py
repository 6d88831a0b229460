"""The output stage: the cascade and sinks for each frame's Result (post-processed by its inference
worker), in order, then the slot is free again."""

from __future__ import annotations

import dataclasses
import socket
import time
from dataclasses import dataclass
from typing import Any

from edge_sdk.backends.runner import EngineRunner
from edge_sdk.core.status import StatusEvent, StatusKind
from edge_sdk.engines.engine import PreparedEngine
from edge_sdk.pipeline.cascade import Cascade, CascadeSpec, NoCascade
from edge_sdk.sinks import SinkFanout, SinkSpec, create_sink
from edge_sdk.sources.spec import BufferPolicy

from ..frame_ring import SlotInfo
from ..frame_steps import FrameDelivery, latency_ms
from ..message_socket import MessageListener
from ..messages import InferenceDone
from .common import POLL_SECONDS, Reporter, RingHandle, StageChannels, StageLink, attach_rings, failures_reported
from .reorder import Reorder


@dataclass(frozen=True)
class OutputPlan:
    owner_id: int
    pipeline_name: str
    cascade: CascadeSpec | None
    cascade_engine: PreparedEngine | None
    sinks: tuple[SinkSpec, ...]
    rings: tuple[RingHandle, ...]
    channels: StageChannels
    results: socket.socket
    """The listening socket of the results channel; the runtime keeps it open across restarts."""
    report_seconds: float
    resumed: bool = False
    """A restart after a crash: sinks continue after what they already hold."""
    late_results: bool = False
    """The dispatch may hand a frame's result back after newer frames' (offload): a live source's
    results then wait for the older frames still being inferred instead of dropping them."""

    def after_crash(self, restart: int) -> OutputPlan:
        """The plan of the output stage's `restart`-th process: files are appended to (JSONL), or
        continued in a new part (an mp4 cannot be appended to: name.partN.mp4)."""
        sinks = tuple(spec.after_restart(restart) for spec in self.sinks)
        return dataclasses.replace(self, sinks=sinks, resumed=True)


def run_output(plan: OutputPlan) -> None:
    link = StageLink(plan.channels, "output")
    with failures_reported(link, "output"):
        inbox = MessageListener(plan.results)
        output = _Output(plan, link)
        reorder = Reorder(
            [ring.policy for ring in plan.rings],
            older_in_flight=lambda index: output.rings[index].oldest_pending_seq(other_than=plan.owner_id),
            delivered_through=lambda index: output.rings[index].delivered_through,
            older_claimed=(
                (lambda index: output.rings[index].oldest_pending_seq(other_than=plan.owner_id, claimed_only=True))
                if plan.late_results
                else None
            ),
        )
        try:
            while link.parent_alive():
                workers_done = link.control.workers_done.is_set()  # read before receive(): nothing can follow it
                messages = inbox.receive(POLL_SECONDS)
                if not messages and workers_done:
                    break
                for done in messages:
                    if done.result.update:
                        output.deliver_update(done)
                    elif output.take(done):
                        ready, stale = reorder.push(done)
                        output.drop(stale)
                        output.deliver(ready)
                output.deliver(reorder.due())
                output.reporter.tick()
            last, behind_a_gap = reorder.flush()
            output.deliver(last)
            output.drop(behind_a_gap)
        finally:
            output.close()
            inbox.close()
            link.close()


class _Output:
    """Cascade, sinks, slot release, and the counters the run summary needs."""

    def __init__(self, plan: OutputPlan, link: StageLink):
        self.owner_id = plan.owner_id
        self.policies = [ring.policy for ring in plan.rings]
        self.read_ahead = [not ring.live for ring in plan.rings]
        self.rings = attach_rings(plan.rings)
        self.link = link
        self.reporter = Reporter("output", link, plan.report_seconds, extra=self._report_extra)
        cascade: Cascade | NoCascade = NoCascade()
        self._cascade_runner: EngineRunner | None = None
        if plan.cascade is not None and plan.cascade_engine is not None:
            self._cascade_runner = plan.cascade_engine.open()
            self._cascade_runner.activate()
            cascade = Cascade(plan.cascade, self._cascade_runner)
        self.sinks = SinkFanout([create_sink(spec, plan.pipeline_name) for spec in plan.sinks])
        self.sinks.open()
        if plan.resumed:
            self.sinks.resume()
        self.delivery = FrameDelivery(cascade, self.sinks)
        self.reported_failures: set[str] = set()
        self.timing_sums: dict[str, float] = {}
        self.first_result_at: float | None = None
        self.last_result_at: float | None = None
        self.updates = 0
        self.model_frames: dict[str, int] = {}

    def take(self, done: InferenceDone) -> bool:
        """Take the frame's slot over from the worker that sent it; False for a stale message (its
        worker died and the frame went back to the ring to be redone)."""
        return self.rings[done.source_index].take_over(done.slot, done.frame.index, done.holder, self.owner_id)

    def deliver(self, results: list[InferenceDone]) -> None:
        for done in results:
            self._deliver(done)

    def _deliver(self, done: InferenceDone) -> None:
        # Should this raise, the slot stays ours: the runtime gives the frame back to be redone.
        started = time.perf_counter()
        ring = self.rings[done.source_index]
        image = ring.frame(SlotInfo(done.slot, done.frame.index, done.frame.height, done.frame.width, done.captured_at))
        result, sinks_seconds = self.delivery(done.result, image, done.captured_at)
        ring.release(done.slot, delivered=True)
        for name, value in (*result.timings_ms.items(), ("sinks", sinks_seconds * 1000)):
            self.timing_sums[name] = self.timing_sums.get(name, 0.0) + value
        now = time.time()
        self.first_result_at = self.first_result_at or now
        self.last_result_at = now
        self.reporter.frames += 1
        if result.model is not None:
            self.model_frames[result.model] = self.model_frames.get(result.model, 0) + 1
        self.reporter.latencies.append(latency_ms(result.timings_ms, self.read_ahead[done.source_index]))
        self.reporter.busy += time.perf_counter() - started
        if len(self.sinks.failures) > len(self.reported_failures):
            for name, problem in self.sinks.failures.items():
                if name not in self.reported_failures:
                    self.reported_failures.add(name)
                    self.link.report(StatusEvent(StatusKind.SINK_FAILED, name, problem))

    def deliver_update(self, done: InferenceDone) -> None:
        """A refined result of a frame delivered before (offload's escalation): to the sinks that
        write results, at once; it holds no slot."""
        self.sinks.write_update(done.result)
        self.updates += 1

    def _report_extra(self) -> dict[str, Any]:
        return {
            "sink_failures": dict(self.sinks.failures),
            "timing_sums": dict(self.timing_sums),
            "first_result_at": self.first_result_at,
            "last_result_at": self.last_result_at,
            "updates": self.updates,
            "model_frames": dict(self.model_frames),
        }

    def drop(self, results: list[InferenceDone]) -> None:
        """Free the slots of results not to deliver: a live frame overtaken by a newer one (counted
        as dropped), or a file frame that was delivered before a restart and redone."""
        for done in results:
            ring = self.rings[done.source_index]
            ring.release(done.slot)
            if self.policies[done.source_index] == BufferPolicy.LATEST:
                ring.count_dropped()

    def close(self) -> None:
        self.sinks.close()
        if self._cascade_runner is not None:
            self._cascade_runner.deactivate()
        self.reporter.tick(force=True)
        for ring in self.rings:
            ring.close()
