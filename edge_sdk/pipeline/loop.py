"""The in-process runtime: source -> preprocess -> engine -> postprocess -> sinks, one frame at a time.

The multi-process shared-memory runtime replaces this loop behind the same config and CLI.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack

from edge_sdk.engines.cache import EngineCache
from edge_sdk.engines.engine import prepare_engine
from edge_sdk.engines.model_file import ModelFile
from edge_sdk.engines.tensor_meta import TensorMeta
from edge_sdk.errors import ConfigError
from edge_sdk.postprocess import build_postprocessor
from edge_sdk.profiles import DeviceProfile
from edge_sdk.results import Result
from edge_sdk.sinks import SinkFanout, create_sink
from edge_sdk.sources.base import Source
from edge_sdk.sources.registry import create_source

from .config import PipelineConfig
from .metrics import LatencyRecorder, RunSummary
from .preprocess import Preprocessor


def run_pipeline(
    config: PipelineConfig,
    profile: DeviceProfile,
    cache: EngineCache | None = None,
    stop: threading.Event | None = None,
    on_result: Callable[[Result], None] | None = None,
) -> RunSummary:
    """Run until every source ends (or `stop` is set); returns frame count, FPS and latencies."""
    stop = stop or threading.Event()
    # Check that the model fits the pipeline before spending time on an engine build.
    model = ModelFile.load(config.model.path)
    model_input = select_input(model.inputs, config.model.input)
    preprocess = Preprocessor(config.preprocess, model_input)
    postprocess = build_postprocessor(config.postprocess)
    postprocess.check_outputs(model.outputs)
    prepared = prepare_engine(model, profile, config.model.precision, cache)
    latencies = LatencyRecorder()
    frames = 0
    with ExitStack() as stack:
        engine = stack.enter_context(prepared.open())
        sources = [create_source(spec, config.base_dir) for spec in config.sources]
        for source in sources:
            stack.enter_context(source)
        sinks = SinkFanout([create_sink(spec) for spec in config.sinks])
        stack.callback(sinks.close)
        sinks.open()
        limits = {id(source): spec.max_frames for source, spec in zip(sources, config.sources, strict=True)}
        active: list[Source] = list(sources)
        started = time.perf_counter()
        while active and not stop.is_set():
            for source in list(active):
                if stop.is_set():
                    break
                t0 = time.perf_counter()
                frame = source.read()
                limit = limits[id(source)]
                if frame is None or (limit is not None and frame.meta.index >= limit):
                    active.remove(source)
                    continue
                t1 = time.perf_counter()
                tensor = preprocess(frame.image)
                t_pre = time.perf_counter()
                outputs = engine.infer({model_input.name: tensor})
                t2 = time.perf_counter()
                geometry = preprocess.geometry(frame.meta.width, frame.meta.height)
                result = postprocess({name: value[0] for name, value in outputs.items()}, frame.meta, geometry)
                t3 = time.perf_counter()
                timings = {
                    "capture": t1 - t0,
                    "preprocess": t_pre - t1,
                    "infer": t2 - t_pre,
                    "postprocess": t3 - t2,
                    "total": t3 - t1,
                }
                result = dataclasses.replace(result, timings_ms={k: v * 1000 for k, v in timings.items()})
                sinks.write(result, frame.image)
                if on_result:
                    on_result(result)
                for stage, ms in result.timings_ms.items():
                    latencies.add(stage, ms)
                latencies.add("sinks", (time.perf_counter() - t3) * 1000)
                frames += 1
        seconds = time.perf_counter() - started
    return RunSummary(
        frames=frames,
        seconds=seconds,
        latency_p50_ms=latencies.percentile("total", 50),
        latency_p99_ms=latencies.percentile("total", 99),
        stage_mean_ms={stage: latencies.mean(stage) for stage in latencies.samples},
        sink_failures=dict(sinks.failures),
        engine_built=prepared.built,
        engine_seconds=prepared.seconds,
    )


def select_input(inputs: Sequence[TensorMeta], name: str | None) -> TensorMeta:
    """The input frames go to: the named one, or the only one."""
    if name is not None:
        for meta in inputs:
            if meta.name == name:
                return meta
        raise ConfigError(f"model.input: the model has no input '{name}'; it has {[m.name for m in inputs]}")
    if len(inputs) != 1:
        raise ConfigError(f"model has {len(inputs)} inputs {[m.name for m in inputs]}; set model.input to one of them")
    return inputs[0]
