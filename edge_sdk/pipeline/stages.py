"""The three kinds of stage process: capture (one per source), inference (batches across sources),
output (post-process, sinks). Each entry point takes one picklable plan and runs until its inputs end
or the pipeline stops; the runtime (runtime.py) starts them and restarts the ones that crash."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import queue
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edge_sdk.engines.engine import PreparedEngine
from edge_sdk.postprocess import PostprocessSpec, build_postprocessor
from edge_sdk.postprocess.cascade import Cascade, CascadeSpec, NoCascade
from edge_sdk.results import FrameMeta, Result
from edge_sdk.sinks import SinkFanout, SinkSpec, create_sink
from edge_sdk.sources.registry import create_source
from edge_sdk.sources.spec import BufferPolicy, SourceSpec
from edge_sdk.status import StatusEvent, StatusKind

from .frame_ring import FrameRing, RingLayout, SlotInfo, monotonic
from .messages import InferenceDone, StageReport
from .preprocess import Preprocessor, PreprocessSpec

POLL_SECONDS = 0.05


@dataclass(frozen=True)
class RingHandle:
    """What a child needs to attach to one source's ring."""

    name: str
    layout: RingLayout
    lock: Any
    policy: BufferPolicy


@dataclass(frozen=True)
class StageChannels:
    """Queues and events every stage shares."""

    tokens: Any
    """Capture -> inference: a source index per committed frame (a wake-up; the ring holds the truth)."""
    results: Any
    """Inference -> output: InferenceDone / WorkerEnded."""
    reports: Any
    """Every stage -> runtime: StageReport and StatusEvent."""
    stop: Any
    """Set by the runtime: finish what is in flight and exit."""
    captures_done: Any
    """Set by the runtime once every capture stage has finished: workers drain the rings and exit."""
    workers_done: Any
    """Set by the runtime once every inference worker has finished: output drains its queue and exits."""


@dataclass(frozen=True)
class CapturePlan:
    index: int
    owner_id: int
    spec: SourceSpec
    base_dir: Path
    ring: RingHandle
    channels: StageChannels
    resume_after: int
    """Skip frames up to this index (a restarted capture of a file continues where it was)."""
    report_seconds: float


@dataclass(frozen=True)
class InferencePlan:
    worker: int
    owner_id: int
    output_owner_id: int
    engine: PreparedEngine
    threads: int | None
    input_name: str
    preprocess: PreprocessSpec
    source_names: tuple[str, ...]
    rings: tuple[RingHandle, ...]
    channels: StageChannels
    batch_size: int
    batch_timeout: float
    report_seconds: float


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


class _Reporter:
    """Counts a stage's work and sends a StageReport every `every` seconds."""

    def __init__(self, stage: str, reports: Any, every: float):
        self.stage, self.reports, self.every = stage, reports, every
        self.frames = 0
        self.dropped = 0
        self.busy = 0.0
        self.latencies: list[float] = []
        self.extra: dict[str, Any] = {}
        self._next = time.monotonic() + every

    def tick(self, force: bool = False) -> None:
        if force or time.monotonic() >= self._next:
            report = StageReport(
                self.stage, os.getpid(), self.frames, self.busy, self.dropped, self.latencies, dict(self.extra)
            )
            self.reports.put(report)
            self.latencies = []
            self._next = time.monotonic() + self.every


def _child_setup() -> Callable[[], bool]:
    """Ignore Ctrl-C (the runtime drains the pipeline) and return a check that the parent is alive."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = os.getppid()
    return lambda: os.getppid() == parent


def _attach(handles: tuple[RingHandle, ...]) -> list[FrameRing]:
    return [FrameRing.attach(h.name, h.layout, h.lock) for h in handles]


# --- capture -------------------------------------------------------------------------------------------


def run_capture(plan: CapturePlan) -> None:
    parent_alive = _child_setup()
    ring = FrameRing.attach(plan.ring.name, plan.ring.layout, plan.ring.lock)
    channels = plan.channels
    reporter = _Reporter(f"capture:{plan.spec.name or plan.index}", channels.reports, plan.report_seconds)
    live_policy = plan.ring.policy == BufferPolicy.LATEST
    source = create_source(plan.spec, plan.base_dir, on_status=channels.reports.put, stop=channels.stop)
    reporter.stage = f"capture:{source.name}"
    try:
        with source:
            while not channels.stop.is_set() and parent_alive():
                frame = source.read()
                if frame is None:
                    break
                index = frame.meta.index
                if index <= plan.resume_after:
                    continue
                if plan.spec.max_frames is not None and index >= plan.spec.max_frames:
                    break
                started = time.perf_counter()
                slot = _slot_for_write(ring, plan, live_policy, reporter, parent_alive)
                if slot is None:
                    if channels.stop.is_set() or not parent_alive():
                        break
                    continue  # live source and every slot busy: this frame is dropped (counted)
                image = frame.image
                height, width = image.shape[:2]
                ring.frame_buffer(slot, height, width)[...] = _fit(image, ring.layout)
                ring.commit(slot, index, height, width, monotonic())
                reporter.frames += 1
                reporter.busy += time.perf_counter() - started
                reporter.dropped = ring.dropped
                _wake(channels.tokens, plan.index)
                reporter.tick()
    finally:
        reporter.dropped = ring.dropped
        reporter.tick(force=True)
        ring.close()


def _slot_for_write(
    ring: FrameRing, plan: CapturePlan, live: bool, reporter: _Reporter, parent_alive: Callable[[], bool]
) -> int | None:
    while True:
        slot, _dropped_ready = ring.acquire_for_write(plan.owner_id, drop_ready=live)
        if slot is not None:
            return slot
        if live:
            ring.count_dropped()
            return None
        if plan.channels.stop.wait(0.005) or not parent_alive():  # files: back-pressure, nothing is lost
            return None


def _fit(image: np.ndarray, layout: RingLayout) -> np.ndarray:
    if image.shape[0] <= layout.max_height and image.shape[1] <= layout.max_width:
        return image
    raise ValueError(
        f"frame {image.shape[1]}x{image.shape[0]} is larger than the ring's "
        f"{layout.max_width}x{layout.max_height} slots; set the source's max_frame_size"
    )


def _wake(tokens: Any, index: int) -> None:
    # A full queue means the workers are awake with plenty to do; the ring holds the frame anyway.
    with contextlib.suppress(queue.Full):
        tokens.put_nowait(index)


# --- inference -----------------------------------------------------------------------------------------


def run_inference(plan: InferencePlan) -> None:
    parent_alive = _child_setup()
    rings = _attach(plan.rings)
    channels = plan.channels
    reporter = _Reporter(f"inference:{plan.worker}", channels.reports, plan.report_seconds)
    runner = plan.engine.open(threads=plan.threads, share_cpu=True)
    runner.activate()
    model_input = next(meta for meta in runner.inputs if meta.name == plan.input_name)
    preprocess = Preprocessor(plan.preprocess, model_input)
    next_source = 0
    try:
        # On stop, what was already inferred still reaches the sinks; frames waiting in rings do not.
        while parent_alive() and not channels.stop.is_set():
            batch = _gather(rings, plan, next_source)
            next_source = (next_source + 1) % len(rings)
            if batch:
                started = time.perf_counter()
                _infer_batch(batch, rings, plan, runner, preprocess)
                reporter.frames += len(batch)
                reporter.busy += time.perf_counter() - started
                reporter.tick()
                continue
            if channels.captures_done.is_set() and not _any_ready(rings):
                break
            try:
                channels.tokens.get(timeout=POLL_SECONDS)
            except queue.Empty:
                reporter.tick()
    finally:
        reporter.tick(force=True)
        runner.deactivate()
        for ring in rings:
            ring.close()


def _gather(rings: list[FrameRing], plan: InferencePlan, first: int) -> list[tuple[int, SlotInfo]]:
    """Claim up to batch_size frames across sources; wait up to batch_timeout to fill a batch."""
    batch: list[tuple[int, SlotInfo]] = []
    deadline = time.monotonic() + plan.batch_timeout
    while True:
        for offset in range(len(rings)):
            index = (first + offset) % len(rings)
            room = plan.batch_size - len(batch)
            if room <= 0:
                return batch
            newest = plan.rings[index].policy == BufferPolicy.LATEST
            batch += [(index, info) for info in rings[index].take_ready(plan.owner_id, newest, room)]
        if len(batch) >= plan.batch_size or not batch or time.monotonic() >= deadline:
            return batch
        time.sleep(0.0005)


def _any_ready(rings: list[FrameRing]) -> bool:
    return any(ring.states()["ready"] for ring in rings)


def _infer_batch(
    batch: list[tuple[int, SlotInfo]],
    rings: list[FrameRing],
    plan: InferencePlan,
    runner: Any,
    preprocess: Preprocessor,
) -> None:
    started = time.perf_counter()
    tensors = [preprocess(rings[index].frame(info)) for index, info in batch]
    # Frames of different sizes (no resize in the pipeline file) cannot share one tensor.
    groups: dict[tuple[int, ...], list[int]] = {}
    for position, tensor in enumerate(tensors):
        groups.setdefault(tensor.shape, []).append(position)
    preprocessed = time.perf_counter()
    outputs_per_frame: list[dict[str, np.ndarray]] = [{} for _ in batch]
    for positions in groups.values():
        stacked = np.concatenate([tensors[p] for p in positions]) if len(positions) > 1 else tensors[positions[0]]
        outputs = runner.infer({plan.input_name: stacked})
        for row, position in enumerate(positions):
            outputs_per_frame[position] = {name: np.array(value[row]) for name, value in outputs.items()}
    inferred = time.perf_counter()
    timings = {
        "preprocess": (preprocessed - started) * 1000 / len(batch),
        "infer": (inferred - preprocessed) * 1000 / len(batch),
        "batch": float(len(batch)),
    }
    now_wall, now_mono = time.time(), monotonic()
    for (index, info), outputs in zip(batch, outputs_per_frame, strict=True):
        meta = FrameMeta(
            plan.source_names[index], info.seq, now_wall - (now_mono - info.timestamp), info.width, info.height
        )
        rings[index].hand_over(info.slot, plan.output_owner_id)
        done = InferenceDone(
            index, info.slot, meta, info.timestamp, preprocess.geometry(info.width, info.height), outputs, timings
        )
        if not _put_result(plan.channels, done):
            rings[index].release(info.slot)


def _put_result(channels: StageChannels, done: InferenceDone, patience: float = 2.0) -> bool:
    """Queue a result for the output stage; when stopping and the output stage takes nothing (it
    died), give up after `patience` seconds instead of blocking the drain."""
    waited = 0.0
    while True:
        try:
            channels.results.put(done, timeout=POLL_SECONDS)
            return True
        except queue.Full:
            if channels.stop.is_set():
                waited += POLL_SECONDS
                if waited >= patience:
                    return False


# --- output --------------------------------------------------------------------------------------------


def run_output(plan: OutputPlan) -> None:
    parent_alive = _child_setup()
    output = _Output(plan)
    channels = plan.channels
    reorder = _Reorder(
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
        self.rings = _attach(plan.rings)
        self.reports = plan.channels.reports
        self.reporter = _Reporter("output", self.reports, plan.report_seconds)
        self.postprocess = build_postprocessor(plan.postprocess)
        self.cascade: Cascade | NoCascade = NoCascade()
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
        for name, problem in self.sinks.failures.items():
            if name not in self.reported_failures:
                self.reported_failures.add(name)
                self.reports.put(StatusEvent(StatusKind.SINK_FAILED, name, problem))
        self.reporter.extra = {
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
        self.reporter.tick(force=True)
        for ring in self.rings:
            ring.close()


class _Reorder:
    """With several inference workers, results of one source can arrive out of order.

    Files (block policy) are put back in order; a gap (a frame lost with a crashed worker) is skipped
    once later frames have waited `patience` seconds. Live sources (latest policy) have gaps by
    design, so nothing waits: a result older than one already delivered is stale and is dropped.
    """

    def __init__(
        self,
        policies: list[BufferPolicy],
        workers: int,
        oldest_pending: Callable[[int], int | None],
        patience: float = 1.0,
    ):
        self.ordered = [workers > 1 and policy == BufferPolicy.BLOCK for policy in policies]
        self.oldest_pending = oldest_pending
        """Lowest frame index of a source still in flight: where its order starts (also after a restart)."""
        self.patience = patience
        self.expected: list[int | None] = [None] * len(policies)
        self.waiting: list[dict[int, tuple[float, InferenceDone]]] = [{} for _ in policies]

    def push(self, done: InferenceDone) -> tuple[list[InferenceDone], list[InferenceDone]]:
        """(results to deliver now, stale results to drop)."""
        index = done.source_index
        if not self.ordered[index]:
            expected = self.expected[index]
            if expected is not None and done.frame.index < expected:
                return [], [done]
            self.expected[index] = done.frame.index + 1
            return [done], []
        if self.expected[index] is None:
            self.expected[index] = self.oldest_pending(index)
        self.waiting[index][done.frame.index] = (time.monotonic(), done)
        return self._release(index), []

    def due(self) -> list[InferenceDone]:
        """Results whose wait for a missing predecessor has run out."""
        out = []
        for index in range(len(self.waiting)):
            out += self._release(index)
        return out

    def flush(self) -> list[InferenceDone]:
        out = []
        for waiting in self.waiting:
            out += [done for _, (_, done) in sorted(waiting.items())]
            waiting.clear()
        return out

    def _release(self, index: int) -> list[InferenceDone]:
        waiting, out = self.waiting[index], []
        while waiting:
            expected = self.expected[index]
            oldest = min(waiting)
            if expected is None or oldest == expected or time.monotonic() - waiting[oldest][0] > self.patience:
                out.append(waiting.pop(oldest)[1])
                self.expected[index] = oldest + 1
            else:
                break
        return out
