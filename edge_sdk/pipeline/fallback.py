"""A pipeline's `fallback:` model: the lighter engine frames go to while the circuit breaker is open.

The fallback is prepared as the primary of the pipeline seen with the fallback's model and
preprocessing in its place (`fallback_config`), through the same engine setup: built, cached and
gated like any engine, and refused at build when its outputs do not fit the primary's post-processor
(`check_fallback_outputs`). `BreakerInference` is the FrameInference of both runtimes when a
pipeline has one: it routes each batch to the primary or the fallback by the breaker's state
(`serving/breaker.py`), feeds the breaker each primary frame's latency (the call, plus the wait in
the ring of a live source: an overloaded primary whose frames queue opens it; and, for the half-open
probes, its compute time per frame against the live frames' pace) and redoes a batch whose primary
call raised on the fallback, so no frame is lost to it.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from edge_sdk.backends.runner import EngineRunner
from edge_sdk.core.errors import ModelError
from edge_sdk.core.preprocess import PreprocessSpec, frame_feed
from edge_sdk.core.results import Frame, Result
from edge_sdk.core.status import StatusCallback, StatusEvent, StatusKind
from edge_sdk.core.tensor_meta import TensorMeta
from edge_sdk.engines.engine import PreparedEngine
from edge_sdk.postprocess import Postprocessor
from edge_sdk.serving.breaker import BreakerSettings, BreakerState, CircuitBreaker, Transition

from .config import ModelSpec, PipelineConfig
from .frame_steps import FrameInference

log = logging.getLogger(__name__)

PRIMARY, FALLBACK = "primary", "fallback"
"""`Result.model` of a frame the primary, or the fallback, produced."""
PACE_FRAMES = 16
"""The live frames whose capture times give their pace (the time between frames a probe must beat)."""


@dataclass(frozen=True)
class FallbackPlan:
    """The fallback's prepared engine and how frames feed it; travels to the inference stage."""

    engine: PreparedEngine
    engine_input: TensorMeta
    preprocess: PreprocessSpec
    """Its preprocessing as the engine needs it (`fold` off when the folded form failed the gate)."""
    breaker: BreakerSettings

    @property
    def input_name(self) -> str:
        return self.engine_input.name


def fallback_config(config: PipelineConfig) -> PipelineConfig:
    """The pipeline with the fallback's model and preprocessing in the primary's place (and no
    fallback), which the engine setup builds, gates and caches like any pipeline's model."""
    spec = config.fallback
    if spec is None:
        raise ValueError("fallback_config needs a pipeline with a fallback: section")
    model = ModelSpec.model_validate(spec.model_dump(include=set(ModelSpec.model_fields)))
    return config.model_copy(
        update={"model": model, "preprocess": spec.preprocess or config.preprocess, "fallback": None}
    )


def check_fallback_outputs(
    primary: Sequence[TensorMeta],
    fallback: Sequence[TensorMeta],
    postprocess: Postprocessor,
    same_input: bool,
    what: str,
) -> None:
    """Refuse a fallback whose outputs the primary's post-processor cannot read as it reads the
    primary's: a missing output, another element type or rank, or (for a fallback that takes the same
    input size) another fixed size on an axis but the batch. A fallback with a smaller input may
    differ in sizes that follow the input (a detector's anchors)."""
    try:
        postprocess.check_outputs(fallback)
    except ModelError as error:
        raise ModelError(f"{what} does not fit the primary's post-processor: {error}") from None
    by_name = {meta.name: meta for meta in fallback}
    for name in postprocess.required_outputs():
        ours = next((meta for meta in primary if meta.name == name), None)
        theirs = by_name.get(name)
        if ours is None or theirs is None:
            continue
        problem = _mismatch(ours, theirs, same_input)
        if problem:
            raise ModelError(
                f"{what} does not fit the primary's post-processor: output {theirs.describe()}, the primary's "
                f"{ours.describe()}: {problem}"
            )


def _mismatch(primary: TensorMeta, fallback: TensorMeta, same_input: bool) -> str:
    if primary.dtype != fallback.dtype:
        return f"expected {primary.dtype.name}, got {fallback.dtype.name}"
    if len(primary.shape) != len(fallback.shape):
        return f"expected {len(primary.shape)} dimensions, got {len(fallback.shape)}"
    if not same_input:
        return ""
    for axis, (ours, theirs) in enumerate(zip(primary.shape[1:], fallback.shape[1:], strict=True), start=1):
        if isinstance(ours, int) and isinstance(theirs, int) and ours != theirs:
            return f"expected {ours} on axis {axis}, got {theirs}"
    return ""


class BreakerInference(FrameInference):
    """FrameInference on the primary while the breaker lets it, else (and for a call that raised) on
    the fallback; each Result says which model produced it. One per inference worker: each worker's
    breaker judges the calls it makes."""

    def __init__(
        self,
        primary: FrameInference,
        fallback: FrameInference,
        settings: BreakerSettings,
        subject: str,
        on_status: StatusCallback,
        live_sources: frozenset[str] = frozenset(),
    ) -> None:
        super().__init__(primary.runner, primary.input_name, primary.feed, primary.postprocess)
        self.fallback, self.subject, self.on_status, self.live_sources = fallback, subject, on_status, live_sources
        self.breaker = CircuitBreaker(settings, on_change=self._changed)
        self.frames = {PRIMARY: 0, FALLBACK: 0}
        self.errors = 0
        """Primary calls that raised (their frames were redone on the fallback)."""
        self._arrivals: deque[float] = deque(maxlen=PACE_FRAMES)
        """When the last live frames this worker took were captured (wall clock, s), for their pace."""

    def __call__(self, frames: Sequence[Frame], queued_ms: Sequence[float] | None = None) -> list[Result]:
        self._arrivals.extend(frame.meta.timestamp for frame in frames if frame.meta.source in self.live_sources)
        if not self.breaker.use_primary():
            return self._tagged(self.fallback(frames, queued_ms), FALLBACK)
        started = time.perf_counter()
        try:
            results = super().__call__(frames, queued_ms)
        except Exception as error:  # the engine, its input check or the post-processor on its outputs
            self.errors += 1
            log.debug("%s: the primary failed, frames redone on the fallback: %s", self.subject, error)
            failed_ms = (time.perf_counter() - started) * 1000
            for _frame in frames:
                self.breaker.record(failed_ms, failed=True)
            return self._tagged(self.fallback(frames, queued_ms), FALLBACK)
        call_ms = (time.perf_counter() - started) * 1000
        waits = queued_ms if queued_ms is not None else [0.0] * len(frames)
        interval_ms = self._interval_ms()
        for frame, waited in zip(frames, waits, strict=True):
            live = frame.meta.source in self.live_sources
            latency_ms = call_ms + (waited if live else 0.0)
            self.breaker.record(latency_ms, compute_ms=call_ms / len(frames), interval_ms=interval_ms if live else None)
        return self._tagged(results, PRIMARY)

    def _interval_ms(self) -> float | None:
        """The mean time between the live frames this worker took lately (None: too few to tell)."""
        if len(self._arrivals) < PACE_FRAMES // 2:
            return None
        span = max(self._arrivals) - min(self._arrivals)
        return span * 1000 / (len(self._arrivals) - 1) if span > 0 else None

    def stats(self) -> dict[str, Any]:
        """Counters for --stats and Prometheus: state, frames per model, openings, primary errors."""
        return {
            "state": self.breaker.state.value,
            "frames": dict(self.frames),
            "openings": self.breaker.openings,
            "errors": self.errors,
        }

    def _tagged(self, results: list[Result], model: str) -> list[Result]:
        self.frames[model] += len(results)
        return [dataclasses.replace(result, model=model) for result in results]

    def _changed(self, change: Transition) -> None:
        verb = {BreakerState.OPEN: "opened", BreakerState.HALF_OPEN: "half-open", BreakerState.CLOSED: "closed"}
        then = {
            BreakerState.OPEN: f"frames go to the fallback model for {self.breaker.ejection_s():g} s",
            BreakerState.HALF_OPEN: f"probing the primary with {self.breaker.settings.half_open_probes} frames",
            BreakerState.CLOSED: "frames are back on the primary model",
        }[change.after]
        message = f"{verb[change.after]} ({change.reason}); {then}"
        data = {"state": change.after.value, "previous": change.before.value, "reason": change.reason}
        self.on_status(
            StatusEvent(
                StatusKind.MODEL_BREAKER, self.subject, message, data=data | {"openings": self.breaker.openings}
            )
        )


def breaker_inference(
    primary: FrameInference,
    plan: FallbackPlan,
    runner: EngineRunner,
    subject: str,
    on_status: StatusCallback,
    live_sources: frozenset[str] = frozenset(),
) -> BreakerInference:
    """The breaker around `primary`, with the fallback on `runner` (activated by the caller)."""
    model_input = next(meta for meta in runner.inputs if meta.name == plan.input_name)
    fallback = FrameInference(runner, plan.input_name, frame_feed(plan.preprocess, model_input), primary.postprocess)
    return BreakerInference(primary, fallback, plan.breaker, subject, on_status, live_sources)


def stage_inference(
    primary: FrameInference,
    plan: FallbackPlan | None,
    threads: int | None,
    subject: str,
    on_status: StatusCallback,
    live_sources: frozenset[str],
) -> FrameInference:
    """An inference worker's FrameInference: `primary` itself without a fallback, else the breaker
    with the fallback's engine open in this process (it lives as long as the worker)."""
    if plan is None:
        return primary
    runner = plan.engine.open(threads=threads, share_cpu=True)
    runner.activate()
    return breaker_inference(primary, plan, runner, subject, on_status, live_sources)


def breaker_stats(infer: FrameInference) -> dict[str, Any]:
    """The `breaker` counters of a stage report: empty without a fallback."""
    return {"breaker": infer.stats()} if isinstance(infer, BreakerInference) else {}
