"""The inline runtime: source -> the frame steps (frame_steps.py: preprocess -> engine -> postprocess,
then cascade -> sinks), one frame at a time, in one process (`runtime.mode: inline`): for debugging,
single-core boxes, and as the baseline the multi-process runtime is measured against."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import ExitStack

import numpy as np

from edge_sdk.core.errors import SourceError
from edge_sdk.core.preprocess import frame_feed
from edge_sdk.core.results import Result
from edge_sdk.core.status import StatusCallback, StatusEvent, StatusKind, ignore_status
from edge_sdk.core.systemd_notify import SystemdNotifier
from edge_sdk.engines.cache import EngineCache
from edge_sdk.pipeline.engine_setup import open_cascade, prepare_models
from edge_sdk.pipeline.slo import check_slo
from edge_sdk.postprocess import build_postprocessor
from edge_sdk.profiles import DeviceProfile
from edge_sdk.sinks import SinkFanout, create_sink
from edge_sdk.sources.base import Source
from edge_sdk.sources.registry import create_source
from edge_sdk.sources.skipped_frames import report

from .config import PipelineConfig
from .extensions import make_dispatch
from .fallback import breaker_inference
from .frame_ring import monotonic
from .frame_steps import FrameDelivery, FrameInference
from .metrics import LatencyRecorder, RunSummary
from .status_log import logged


def run_inline(
    config: PipelineConfig,
    profile: DeviceProfile,
    cache: EngineCache | None = None,
    stop: threading.Event | None = None,
    on_result: Callable[[Result], None] | None = None,
    on_status: StatusCallback = ignore_status,
    notifier: SystemdNotifier | None = None,
) -> RunSummary:
    """Run until every source ends (or `stop` is set); returns frame count, FPS, latencies and the
    frames each source skipped.

    A source that cannot be created or opened raises its SourceError (one line naming the source
    and the cause) before any frame, after closing what was opened. A source that fails while it is
    read (`on_error: stop` at a corrupt frame, a camera whose reconnect policy gave up) ends; the
    others go on, and the summary's `source_failures` says which failed and why.
    """
    stop = stop or threading.Event()
    notifier = notifier or SystemdNotifier(None)  # systemd's, under `edge-sdk run` (see run_pipeline)
    on_status = logged(on_status)
    sources = [create_source(spec, config.base_dir, on_status=on_status, stop=stop) for spec in config.sources]
    latencies = LatencyRecorder()
    frames = 0
    model_frames: dict[str, int] = {}
    """Frames per model that computed them, with a fallback model."""
    with ExitStack() as stack:
        # Files and folders open before the engine is built or loaded: a missing one fails in a moment.
        # Live sources open after it, so a camera's first frames are not minutes old.
        for source in sources:
            if not source.is_live:
                stack.enter_context(source)
        models = prepare_models(config, profile, cache)
        check_slo(models.primary, models.engine_input, config.runtime.latency_slo_ms)
        on_status(StatusEvent(StatusKind.PIPELINE_STARTED, config.name))
        notifier.ready(f"pipeline {config.name} started")
        feed = frame_feed(models.preprocess, models.engine_input)
        postprocess = build_postprocessor(config.postprocess)
        engine = stack.enter_context(models.primary.open())
        cascade = open_cascade(config, models, stack)
        # Stopped while the engine loaded: no camera to connect to, and no sink to open (a file sink
        # would start its file anew) for a loop that will not run.
        starting = not stop.is_set()
        for source in sources:
            if source.is_live and starting:
                stack.enter_context(source)
        sinks = SinkFanout([create_sink(spec, config.name) for spec in config.sinks])
        stack.callback(sinks.close)
        if starting:
            sinks.open()
        infer = FrameInference(engine, models.input_name, feed, postprocess)
        live = frozenset(source.name for source in sources if source.is_live)
        if models.fallback is not None:
            runner = stack.enter_context(models.fallback.engine.open())
            infer = breaker_inference(infer, models.fallback, runner, config.name, on_status, live)
        dispatch = make_dispatch(config, profile, cache.root if cache else None, infer, 0, on_status, 1, live)
        stack.callback(dispatch.close)
        deliver = FrameDelivery(cascade, sinks)
        in_flight: dict[tuple[str, int], tuple[np.ndarray, float]] = {}
        """Frames handed to the dispatch: their pixels and when they were in hand, until their result is back."""

        def delivered(wait_s: float = 0.0) -> int:
            count = 0
            for meta, result in dispatch.collect(wait_s):
                if result.update:
                    sinks.write_update(result)
                    if on_result:
                        on_result(result)
                    continue
                image, in_hand_at = in_flight.pop((meta.source, meta.index))
                result, sinks_seconds = deliver(result, image, in_hand_at)
                if on_result:
                    on_result(result)
                if result.model is not None:
                    model_frames[result.model] = model_frames.get(result.model, 0) + 1
                for stage, ms in result.timings_ms.items():
                    latencies.add(stage, ms)
                latencies.add("sinks", sinks_seconds * 1000)
                count += 1
            return count

        active: list[Source] = list(sources)
        source_failures: dict[str, str] = {}
        started = time.perf_counter()
        while active and not stop.is_set():
            notifier.watchdog_if_due()  # a source read or an engine call that hangs stops the pings
            for source in list(active):
                if stop.is_set():
                    break
                reading = monotonic()
                try:
                    frame = source.read()
                except SourceError as error:
                    active.remove(source)
                    source_failures[source.name] = str(error)
                    if not source.is_live:  # a live source's reconnect policy reports its own failure
                        report(on_status, StatusEvent(StatusKind.SOURCE_FAILED, source.name, str(error)))
                    continue
                if frame is None:
                    active.remove(source)
                    continue
                in_hand_at = monotonic()
                latencies.add("capture", (in_hand_at - reading) * 1000)
                in_flight[(frame.meta.source, frame.meta.index)] = (frame.image, in_hand_at)
                dispatch.submit([frame], [0.0])
                frames += delivered()
        # Frames sent away come back by their deadline at the latest (the dispatch falls back to this
        # engine); updates of delivered frames (escalation) come or are given up by theirs.
        if stop.is_set():
            notifier.stopping(f"pipeline {config.name} draining")
        while in_flight or dispatch.in_flight:
            notifier.watchdog_if_due()
            frames += delivered(wait_s=0.05)
        seconds = time.perf_counter() - started
        skipped: dict[str, int] = {}
        for source in sources:
            skipped[source.name] = skipped.get(source.name, 0) + source.frames_skipped
    return RunSummary(
        frames=frames,
        seconds=seconds,
        latency_p50_ms=latencies.percentile("total", 50),
        latency_p99_ms=latencies.percentile("total", 99),
        stage_mean_ms={stage: latencies.mean(stage) for stage in latencies.samples if stage != "batch"},
        sink_failures=dict(sinks.failures),
        frames_skipped=skipped,
        source_failures=source_failures,
        engine_built=models.primary.built,
        engine_seconds=models.primary.seconds,
        model_frames=model_frames,
    )
