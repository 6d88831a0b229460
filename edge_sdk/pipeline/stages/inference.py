"""The inference stage: workers that batch frames across sources, run the engine and post-process each frame."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from edge_sdk.backends.runner import EngineRunner
from edge_sdk.core.preprocess import PreprocessSpec, frame_feed
from edge_sdk.core.results import Frame, FrameMeta
from edge_sdk.core.tensor_meta import TensorMeta
from edge_sdk.engines.engine import PreparedEngine
from edge_sdk.postprocess import PostprocessSpec, build_postprocessor
from edge_sdk.profiles import DeviceProfile

from ..config import PipelineConfig, RuntimeSpec
from ..dispatch import FrameDispatch, LocalDispatch
from ..extensions import make_dispatch
from ..fallback import FallbackPlan, breaker_stats, stage_inference
from ..frame_ring import FrameRing, SlotInfo, monotonic
from ..frame_steps import FrameInference
from ..gather import FillGatherer, Gatherer, SloGatherer
from ..message_socket import MessageSender
from ..messages import InferenceDone
from ..slo import seeded_batcher
from .common import IDLE_SECONDS, Reporter, RingHandle, StageChannels, StageLink, attach_rings, failures_reported


@dataclass(frozen=True)
class InferencePlan:
    worker: int
    owner_id: int
    engine: PreparedEngine
    threads: int | None
    input_name: str
    preprocess: PreprocessSpec
    postprocess: PostprocessSpec
    source_names: tuple[str, ...]
    rings: tuple[RingHandle, ...]
    channels: StageChannels
    batching: RuntimeSpec
    """The runtime section: batch_size with batch_timeout_ms, or latency_slo_ms (an SloBatcher picks the
    batch, batch_size its largest)."""
    report_seconds: float
    dispatch: DispatchPlan | None = None
    """Where frames go when the pipeline has an extension (offload); None: all here."""
    workers: int = 1
    """Inference workers sharing the rings: each sees every arrival and serves its share."""
    fallback: FallbackPlan | None = None
    """The `fallback:` model and its breaker; None: every frame on `engine`."""


@dataclass(frozen=True)
class DispatchPlan:
    config: PipelineConfig
    profile: DeviceProfile
    cache_dir: Path | None
    workers: int = 1
    """Inference workers sharing the sources' frames."""
    live_sources: frozenset[str] = frozenset()
    """Sources whose frames arrive in real time."""


def run_inference(plan: InferencePlan) -> None:
    link = StageLink(plan.channels, "infer")
    stage = f"inference:{plan.worker}"
    with failures_reported(link, stage):
        rings = attach_rings(plan.rings)
        reporter = Reporter(stage, link, plan.report_seconds)
        results = MessageSender(plan.channels.results_address, give_up=lambda: _give_up_sending(link))
        runner = plan.engine.open(threads=plan.threads, share_cpu=True)
        try:
            runner.activate()
            for ring in rings:
                runner.register_host_memory(ring.pixels)
            model_input = next(meta for meta in runner.inputs if meta.name == plan.input_name)
            feed = frame_feed(plan.preprocess, model_input)
            infer = FrameInference(runner, plan.input_name, feed, build_postprocessor(plan.postprocess))
            live = frozenset(name for name, ring in zip(plan.source_names, plan.rings, strict=True) if ring.live)
            infer = stage_inference(infer, plan.fallback, plan.threads, stage, link.report, live)
            dispatch = _dispatch(plan, infer, link)
            gather = _gatherer(plan, runner, model_input, infer)
            reporter.extra = lambda: {"dispatch": dispatch.stats(), **gather.stats(), **breaker_stats(infer)}
            try:
                _serve(
                    rings, plan, link, reporter, Batcher(plan.owner_id, plan.source_names, dispatch, results), gather
                )
            finally:
                dispatch.close()
        finally:
            reporter.tick(force=True)
            runner.deactivate()
            results.close()
            for ring in rings:
                ring.close()
            link.close()


def _dispatch(plan: InferencePlan, infer: FrameInference, link: StageLink) -> FrameDispatch:
    if plan.dispatch is None:
        return LocalDispatch(infer)
    where = plan.dispatch
    return make_dispatch(
        where.config, where.profile, where.cache_dir, infer, plan.worker, link.report, where.workers, where.live_sources
    )


def _gatherer(plan: InferencePlan, runner: EngineRunner, model_input: TensorMeta, infer: FrameInference) -> Gatherer:
    batching = plan.batching
    if batching.latency_slo_ms is None:
        return FillGatherer(plan.owner_id, batching.batch_size, batching.batch_timeout_ms / 1000, plan.rings)
    slo = seeded_batcher(runner, model_input, batching.latency_slo_ms, batching.batch_size)
    return SloGatherer(plan.owner_id, slo, plan.rings, plan.workers, infer)


def _serve(
    rings: list[FrameRing], plan: InferencePlan, link: StageLink, reporter: Reporter, batcher: Batcher, gather: Gatherer
) -> None:
    """On stop, what was already inferred still reaches the sinks, and frames sent away (and updates
    owed) are waited for, each by its deadline (a frame falls back to this engine); frames waiting in
    rings are not."""
    next_source = 0
    looked_at: list[int] | None = None
    """The rings' ready events when a look found nothing: no need to take their locks again until they change."""
    try:
        while link.running():
            events = [ring.ready_events for ring in rings]
            if events != looked_at:
                batch = gather(rings, next_source)
                next_source = (next_source + 1) % len(rings)
                if batch:
                    started = time.perf_counter()
                    batcher.infer(batch, rings)
                    gather.ran(len(batch), time.perf_counter() - started)
                    reporter.frames += len(batch)
                    reporter.busy += time.perf_counter() - started
                    reporter.tick()
                    continue
                looked_at = events
            if link.control.captures_done.is_set() and not _any_ready(rings) and not batcher.owed:
                return
            reporter.tick()
            if batcher.owed:
                batcher.send_ready(rings, wait_s=IDLE_SECONDS)
            else:
                time.sleep(IDLE_SECONDS)
    finally:
        while batcher.owed and link.parent_alive():
            batcher.send_ready(rings, wait_s=IDLE_SECONDS)


def _give_up_sending(link: StageLink, patience: float = 2.0) -> bool:
    """While stopping, a result the output stage does not take (it died) is given up after
    `patience` seconds instead of holding up the drain; an orphan gives up at once."""
    if not link.parent_alive():
        return True
    waited = link.seconds_since_stop()
    return waited is not None and waited > patience


def _any_ready(rings: list[FrameRing]) -> bool:
    return any(ring.states()["ready"] for ring in rings)


class ResultSender(Protocol):
    """Where a worker's messages go: the results channel's MessageSender (a recording stand-in in tests)."""

    def send(self, message: InferenceDone) -> bool: ...


class Batcher:
    """Hands a batch of claimed slots to the dispatch and sends each frame's Result (never its raw
    outputs) to the output stage as the dispatch hands it back: at once for frames inferred here,
    later for frames sent away."""

    def __init__(
        self, owner_id: int, source_names: Sequence[str], dispatch: FrameDispatch, results: ResultSender
    ) -> None:
        self.owner_id, self.source_names, self.dispatch, self.results = owner_id, source_names, dispatch, results
        self._claimed: dict[tuple[str, int], tuple[int, SlotInfo]] = {}

    @property
    def owed(self) -> bool:
        """A claimed frame's result, or an update of a delivered one (offload's escalation), may still come."""
        return bool(self._claimed) or self.dispatch.in_flight > 0

    def infer(self, batch: list[tuple[int, SlotInfo]], rings: list[FrameRing]) -> None:
        now_wall, now_mono = time.time(), monotonic()
        frames = [
            Frame(
                FrameMeta(
                    self.source_names[index], info.seq, now_wall - (now_mono - info.timestamp), info.width, info.height
                ),
                rings[index].frame(info),
            )
            for index, info in batch
        ]
        for (index, info), frame in zip(batch, frames, strict=True):
            self._claimed[(frame.meta.source, frame.meta.index)] = (index, info)
        self.dispatch.submit(frames, [(now_mono - info.timestamp) * 1000 for _index, info in batch])
        self.send_ready(rings)

    def send_ready(self, rings: list[FrameRing], wait_s: float = 0.0) -> None:
        for meta, result in self.dispatch.collect(wait_s):
            if result.update:  # a refined result of a frame whose slot the output stage already freed
                self.results.send(InferenceDone(-1, -1, self.owner_id, meta, 0.0, result))
                continue
            index, info = self._claimed.pop((meta.source, meta.index))
            done = InferenceDone(index, info.slot, self.owner_id, meta, info.timestamp, result)
            # The output stage takes the slot over when the message arrives. Until then the frame
            # is SENT: if this process or the output stage dies, the runtime gives it back to be redone.
            if rings[index].mark_sent(info.slot, info.seq, self.owner_id) and not self.results.send(done):
                rings[index].release(info.slot)
