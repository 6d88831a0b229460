"""What a worker serves: each pipeline's whole model, built through the engine cache for the worker's
own profile, and the tails registered for it; and how a batch of requests becomes engine calls.

The whole model takes a request's JPEG/WebP, decoded and fed exactly as the edge would feed the frame
(the pipeline's preprocessing, folded into the engine or run on the host), so its raw outputs are what
the edge's own engine would compute on that decoded frame. A tail is anything with the runner's
`inputs` and `infer` (`TailRunner`): an engine from `split_engines`, or a test's ONNX Runtime session.

A request is checked when it arrives (`admit`: the tensor names, dtypes and shapes the part takes), so
one bad request is answered on its own and never fails a batch. Requests stack into one engine call
when every input of the part has a free batch axis; otherwise they run one after another.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from edge_sdk.core.errors import first_line
from edge_sdk.core.preprocess import FrameFeed, frame_feed
from edge_sdk.core.tensor_meta import TensorMeta
from edge_sdk.engines.cache import EngineCache
from edge_sdk.engines.equivalence import scene_frames
from edge_sdk.pipeline.config import PipelineConfig
from edge_sdk.pipeline.engine_setup import PreparedModels, prepare_models
from edge_sdk.profiles import DeviceProfile

from .frame_codec import MAX_PIXELS, decode_frame, downscale, image_size
from .protocol import IMAGE_TENSOR, WHOLE, ModelTimes, model_key
from .tensor_codec import PayloadError
from .worker_batches import Request

log = logging.getLogger("cloud_offload.worker")

MEAN_WEIGHT = 0.2
"""Weight of the newest frame in a model's mean compute time: recent enough to follow a change of
load, smooth enough that one slow frame does not swing the edge's decision."""


class TailRunner(Protocol):
    """What the worker needs of a tail (an EngineRunner is one): its inputs, and a call."""

    @property
    def inputs(self) -> tuple[TensorMeta, ...]: ...

    def infer(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]: ...


@dataclass(frozen=True)
class Outcome:
    request: Request
    outputs: dict[str, np.ndarray] | None
    error: str | None
    queued_ms: float
    compute_ms: float


@dataclass(frozen=True)
class BatchRun:
    outcomes: list[Outcome]
    calls: list[int]
    """The requests in each engine call made."""


class MeanMs:
    def __init__(self, first: float | None = None):
        self.value = first

    def add(self, ms: float) -> None:
        self.value = ms if self.value is None else self.value + MEAN_WEIGHT * (ms - self.value)


class ServedModel:
    """One model key: its whole engine, open, and its tails by part."""

    def __init__(
        self,
        key: str,
        name: str,
        runner: TailRunner,
        feed: FrameFeed,
        input_name: str,
        max_side: int | None,
        shape_follows_frame: bool,
        max_pixels: int = MAX_PIXELS,
    ):
        self.key, self.name = key, name
        self.runner, self.feed, self.input_name = runner, feed, input_name
        self.max_side = max_side
        """The model input's longer side: what the edge downscales its frames to."""
        self.shape_follows_frame = shape_follows_frame
        """Whether the engine's input has the frame's size (folded preprocessing, or no resize)."""
        self.max_pixels = max_pixels
        self.whole_ms = MeanMs()
        self._tails: dict[str, tuple[TailRunner, MeanMs]] = {}
        self._lock = threading.Lock()

    def add_tail(self, part: str, runner: TailRunner, warm_up: bool = True) -> None:
        """Serve `runner` as the tail `part`; warmed up (and timed) first on its `sample_feed` when it has
        one, else on zeros when its input shapes are fixed."""
        times = MeanMs()
        shapes = {meta.name: tuple(d for d in meta.shape if isinstance(d, int)) for meta in runner.inputs}
        feed: dict[str, np.ndarray] | None = getattr(runner, "sample_feed", None)  # a real input, when it has one
        if feed is None and all(len(shapes[meta.name]) == len(meta.shape) for meta in runner.inputs):
            feed = {meta.name: np.zeros(shapes[meta.name], meta.dtype) for meta in runner.inputs}
        if warm_up and feed is not None:
            times.value = _timed_twice(runner, feed)
        with self._lock:
            self._tails[part] = (runner, times)

    def tail(self, part: str) -> TailRunner | None:
        with self._lock:
            found = self._tails.get(part)
        return found[0] if found else None

    def times(self) -> ModelTimes:
        with self._lock:
            tails = {part: times.value for part, (_runner, times) in self._tails.items() if times.value is not None}
        return ModelTimes(whole_ms=self.whole_ms.value, tails_ms=tails)

    def warm_up(self) -> None:
        """Run the whole model twice on the shipped scene, sized as the edge sends it: the first run
        allocates, the second seeds the compute time the worker reports before its first request."""
        self.whole_ms.value = _timed_twice(self.runner, self._scene_feed(1))

    def time_batches(self, sizes: Sequence[int]) -> dict[int, float]:
        """ms of one whole-model call per batch size, each size run once before it is timed (an engine
        meeting a new input shape may search its kernels for it: seconds on a GPU); the sizes up to the
        first the model refuses (a Triton model's max_batch_size below the worker's batch size)."""
        timed: dict[int, float] = {}
        for size in sizes:
            try:
                timed[size] = _timed_twice(self.runner, self._scene_feed(size))
            except Exception as exc:  # what the batcher then learns from the requests themselves
                log.warning("offload worker: model %s cannot be timed at batch %d: %s", self.key, size, first_line(exc))
                break
        return timed

    def _scene_feed(self, batch: int) -> dict[str, np.ndarray]:
        tensor = self.feed(downscale(scene_frames(1)[0], self.max_side))
        return {self.input_name: np.repeat(tensor, batch, axis=0) if batch > 1 else tensor}

    # --- per request, when it arrives (paho's thread) ----------------------------------------------

    def admit(self, part: str, tensors: dict[str, np.ndarray]) -> Hashable:
        """The request's batch shape; PayloadError saying what is wrong with its tensors."""
        if part == WHOLE:
            image = tensors.get(IMAGE_TENSOR)
            if set(tensors) != {IMAGE_TENSOR} or image is None or image.dtype != np.uint8 or image.ndim != 1:
                raise PayloadError(
                    f"expected one tensor '{IMAGE_TENSOR}' (uint8, 1-D: the encoded frame), got {_describe(tensors)}"
                )
            _format, width, height = image_size(image.tobytes())
            if width * height > self.max_pixels:
                raise PayloadError(f"expected an image of at most {self.max_pixels} pixels, got {width}x{height}")
            return (height, width) if self.shape_follows_frame else "resized"
        runner = self.tail(part)
        if runner is None:
            raise LookupError(part)
        expected = {meta.name: meta for meta in runner.inputs}
        if set(tensors) != set(expected):
            raise PayloadError(f"expected tensors {sorted(expected)} for {part}, got {_describe(tensors)}")
        for name, meta in expected.items():
            problem = meta.accepts(tensors[name])
            if problem:
                raise PayloadError(problem)
        return tuple(tensors[name].shape for name in sorted(tensors))

    # --- a batch (the compute thread) ----------------------------------------------------------------

    def run(self, batch: Sequence[Request], started: float) -> BatchRun:
        """Outputs or an error for each request of one batch key; `started`: monotonic() at the batch's start."""
        part = batch[0].part
        runner = self.runner if part == WHOLE else self.tail(part)
        outcomes: list[Outcome] = []
        calls: list[int] = []
        if runner is None:  # a tail taken away while its requests waited
            return BatchRun([_failed(r, "tail not ready", started) for r in batch], calls)
        feeds: list[tuple[Request, dict[str, np.ndarray], float]] = []
        for request in batch:
            begun = time.perf_counter()
            try:
                feed = self._feed(request)
            except PayloadError as exc:
                outcomes.append(_failed(request, f"bad image: {exc}", started))
                continue
            feeds.append((request, feed, _ms_since(begun)))
        groups: dict[Hashable, list[tuple[Request, dict[str, np.ndarray], float]]] = {}
        for item in feeds:  # a batch key promises one shape; a host resize could still differ
            groups.setdefault(tuple(array.shape for array in item[1].values()), []).append(item)
        for group in groups.values():
            outcomes += self._infer(runner, group, started, calls)
        times = self.whole_ms if part == WHOLE else self._tail_times(part)
        for outcome in outcomes:
            if outcome.outputs is not None and times is not None:
                times.add(outcome.compute_ms)
        return BatchRun(outcomes, calls)

    def _feed(self, request: Request) -> dict[str, np.ndarray]:
        if request.part != WHOLE:
            return request.payload.tensors
        frame = decode_frame(request.payload.tensors[IMAGE_TENSOR].tobytes(), self.max_pixels)
        return {self.input_name: self.feed(frame)}

    def _infer(
        self,
        runner: TailRunner,
        group: list[tuple[Request, dict[str, np.ndarray], float]],
        started: float,
        calls: list[int],
    ) -> list[Outcome]:
        queued = {id(request): (started - request.arrived) * 1000 for request, _feed, _ms in group}
        batchable = len(group) > 1 and all(meta.shape and not isinstance(meta.shape[0], int) for meta in runner.inputs)
        if batchable:
            begun = time.perf_counter()
            stacked = {name: np.concatenate([feed[name] for _r, feed, _ms in group]) for name in group[0][1]}
            try:
                outputs = runner.infer(stacked)
            except Exception as exc:  # an engine failure answers this call's requests, and the worker goes on
                calls.append(len(group))
                return [_failed(r, f"engine error: {first_line(exc)}", started) for r, _f, _ms in group]
            calls.append(len(group))
            share = _ms_since(begun) / len(group)
            rows = _rows(outputs, len(group))
            if rows is not None:
                return [
                    Outcome(request, row, None, queued[id(request)], own_ms + share)
                    for (request, _feed, own_ms), row in zip(group, rows, strict=True)
                ]
            # an output without the batch axis cannot be split per request: run them one by one
        outcomes = []
        for request, feed, own_ms in group:
            begun = time.perf_counter()
            try:
                outputs = runner.infer(feed)
            except Exception as exc:
                outcomes.append(_failed(request, f"engine error: {first_line(exc)}", started))
                continue
            finally:
                calls.append(1)
            outcomes.append(Outcome(request, outputs, None, queued[id(request)], own_ms + _ms_since(begun)))
        return outcomes

    def _tail_times(self, part: str) -> MeanMs | None:
        with self._lock:
            found = self._tails.get(part)
        return found[1] if found else None


@dataclass(frozen=True)
class ModelSpec:
    """A served model before it is opened: its engine built (or found) in the cache, its key and size."""

    key: str
    name: str
    models: PreparedModels | None
    """The local engine; None for a model computed elsewhere (`opener`)."""
    max_side: int | None
    engine_bytes: int
    """The engine's files in the cache: what a memory budget can know before the engine is loaded."""
    opener: Callable[[ExitStack, int], ServedModel] | None = None
    """(stack, max_pixels) -> the model, open and warmed up, when it is not a local engine (a Triton
    server's: cloud_offload/triton_runner.py)."""


ModelPreparer = Callable[[PipelineConfig], ModelSpec]
"""A pipeline -> the spec of the model a worker serves for it (default: `prepare_model`'s local engine)."""


def prepare_model(config: PipelineConfig, profile: DeviceProfile, cache: EngineCache) -> ModelSpec:
    """The pipeline's whole model for `profile`, from the cache or built and gated (not opened). The
    cascade stays on the edge (it runs on the frame's pixels there)."""
    config = config.model_copy(update={"cascade": None})
    models = prepare_models(config, profile, cache)
    key = model_key(cache.models.load(config.model.path).sha256, config.preprocess)
    entry = models.primary.entry
    size = sum((entry.directory / name).stat().st_size for name in entry.manifest.get("files", {}))
    resize = config.preprocess.resize
    return ModelSpec(key, config.name, models, max(resize) if resize else None, size)


def open_model(
    spec: ModelSpec, stack: ExitStack, threads: int | None = None, max_pixels: int = MAX_PIXELS
) -> ServedModel:
    """`spec`'s engine open for the life of `stack`, warmed up."""
    if spec.opener is not None:
        return spec.opener(stack, max_pixels)
    models = spec.models
    assert models is not None, "a spec without an opener has a local engine"
    runner = stack.enter_context(models.primary.open(threads=threads))
    served = ServedModel(
        spec.key,
        spec.name,
        runner,
        frame_feed(models.preprocess, models.engine_input),
        models.input_name,
        spec.max_side,
        shape_follows_frame=models.primary.folded or spec.max_side is None,
        max_pixels=max_pixels,
    )
    served.warm_up()
    return served


def load_model(
    config: PipelineConfig,
    profile: DeviceProfile,
    cache: EngineCache,
    stack: ExitStack,
    threads: int | None = None,
    max_pixels: int = MAX_PIXELS,
) -> ServedModel:
    """The pipeline's whole model for `profile`, from the cache or built and gated, open for the life
    of `stack`, warmed up."""
    return open_model(prepare_model(config, profile, cache), stack, threads, max_pixels)


def _rows(outputs: dict[str, np.ndarray], count: int) -> list[dict[str, np.ndarray]] | None:
    """Each request's outputs, keeping a batch axis of 1 (what the edge's engine gives for one frame)."""
    if any(value.ndim == 0 or value.shape[0] != count for value in outputs.values()):
        return None
    return [{name: value[row : row + 1] for name, value in outputs.items()} for row in range(count)]


def _failed(request: Request, error: str, started: float) -> Outcome:
    return Outcome(request, None, error, (started - request.arrived) * 1000, 0.0)


def _timed_twice(runner: TailRunner, feed: dict[str, np.ndarray]) -> float:
    runner.infer(feed)
    begun = time.perf_counter()
    runner.infer(feed)
    return _ms_since(begun)


def _describe(tensors: dict[str, np.ndarray]) -> str:
    return ", ".join(f"'{name}' {array.dtype.name}{list(array.shape)}" for name, array in tensors.items()) or "none"


def _ms_since(begun: float) -> float:
    return (time.perf_counter() - begun) * 1000
