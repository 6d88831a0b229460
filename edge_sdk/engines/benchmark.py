"""Latency and throughput of an engine per batch size, after warm-up."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from edge_sdk.backends.runner import EngineRunner
from edge_sdk.core.errors import ConfigError
from edge_sdk.core.opencv import import_cv2
from edge_sdk.core.tensor_meta import TensorMeta

MAX_BENCH_BATCH = 1024
"""Largest batch size a benchmark runs (the pipeline's runtime.batch_size has the same bound)."""
MAX_DYNAMIC_SIZE = 8192
"""Largest size given to a dynamic non-batch axis."""
MAX_WARMUP = 10_000
MAX_ITERATIONS = 100_000
MAX_FEED_BYTES = 4 * 1024**3
"""Largest set of generated inputs for one batch size: 4 GiB (a 1024 x 3 x 640 x 640 float32 batch is 5 GiB)."""


def check_benchmark_arguments(
    batch_sizes: Sequence[int], warmup: int, iterations: int, dynamic_size: int, inputs: Sequence[TensorMeta] = ()
) -> None:
    """Refuse, with one `ConfigError` line and before any allocation or engine build, arguments out of
    bounds: batches 1..MAX_BENCH_BATCH, warmup 0..MAX_WARMUP, iterations 1..MAX_ITERATIONS, dynamic_size
    1..MAX_DYNAMIC_SIZE, and (when `inputs` is given) generated inputs over MAX_FEED_BYTES per batch."""
    if not batch_sizes:
        raise ConfigError("expected at least one batch size, got none")
    for name, value, low, high in (
        ("warmup", warmup, 0, MAX_WARMUP),
        ("iterations", iterations, 1, MAX_ITERATIONS),
        ("dynamic size", dynamic_size, 1, MAX_DYNAMIC_SIZE),
    ):
        if not low <= value <= high:
            raise ConfigError(f"expected {name} {low}..{high}, got {_shown(value)}")
    for batch in batch_sizes:
        if not 1 <= batch <= MAX_BENCH_BATCH:
            raise ConfigError(f"expected batch sizes 1..{MAX_BENCH_BATCH}, got {_shown(batch)}")
    for meta in inputs:
        batch = max(batch_sizes)
        first = meta.shape[0] if meta.shape else None
        if isinstance(first, int):  # a fixed batch: make_input refuses any other with its own message
            batch = first
        shape = [batch] + [d if isinstance(d, int) else dynamic_size for d in meta.shape[1:]]
        size = math.prod(shape) * meta.dtype.itemsize
        if size > MAX_FEED_BYTES:
            raise ConfigError(
                f"input {meta.name} at batch {batch} ({'x'.join(map(str, shape))} {meta.dtype.name}) needs "
                f"{size / 1024**3:.1f} GiB; expected at most {MAX_FEED_BYTES / 1024**3:.0f} GiB: "
                "lower the batch (or the dynamic size)"
            )


def _shown(value: int) -> str:
    """A number as written, unless it is too long for one line."""
    text = str(value)
    return text if len(text) <= 20 else f"a {len(text)}-digit number"


@dataclass(frozen=True)
class BatchTiming:
    batch: int
    iterations: int
    p50_ms: float
    p99_ms: float
    mean_ms: float
    throughput: float
    """Items (frames) per second."""

    def to_dict(self) -> dict[str, Any]:
        return {k: round(v, 3) if isinstance(v, float) else v for k, v in asdict(self).items()}


def benchmark_engine(
    runner: EngineRunner,
    batch_sizes: Sequence[int],
    warmup: int = 5,
    iterations: int = 50,
    dynamic_size: int = 320,
    image: np.ndarray | None = None,
) -> list[BatchTiming]:
    """Time `runner.infer` on generated inputs (or `image`, a BGR frame, for image inputs); the
    arguments are checked first (`check_benchmark_arguments`), so a huge batch is a ConfigError,
    not a MemoryError."""
    check_benchmark_arguments(batch_sizes, warmup, iterations, dynamic_size, runner.inputs)
    rng = np.random.default_rng(0)
    timings = []
    for batch in batch_sizes:
        feed = {meta.name: make_input(meta, batch, dynamic_size, rng, image) for meta in runner.inputs}
        for _ in range(warmup):
            runner.infer(feed)
        samples = np.empty(iterations)
        for i in range(iterations):
            started = time.perf_counter()
            runner.infer(feed)
            samples[i] = time.perf_counter() - started
        timings.append(
            BatchTiming(
                batch=batch,
                iterations=iterations,
                p50_ms=float(np.percentile(samples, 50) * 1000),
                p99_ms=float(np.percentile(samples, 99) * 1000),
                mean_ms=float(samples.mean() * 1000),
                throughput=float(batch / samples.mean()),
            )
        )
    return timings


def make_input(
    meta: TensorMeta, batch: int, dynamic_size: int, rng: np.random.Generator, image: np.ndarray | None = None
) -> np.ndarray:
    """An input of the right dtype and shape: axis 0 is the batch, other unknown axes get `dynamic_size`."""
    first = meta.shape[0] if meta.shape else None
    if isinstance(first, int) and first != batch:
        raise ConfigError(f"input {meta.describe()} has a fixed batch of {first}; cannot run batch {batch}")
    shape = [batch] + [d if isinstance(d, int) else dynamic_size for d in meta.shape[1:]]
    if image is not None and len(shape) == 4 and 3 in (shape[1], shape[3]):
        return _image_batch(image, shape, meta.dtype)
    if np.issubdtype(meta.dtype, np.integer):
        info = np.iinfo(meta.dtype)
        return rng.integers(max(info.min, 0), min(info.max, 255), size=shape, endpoint=True).astype(meta.dtype)
    if meta.dtype == np.bool_:
        return rng.integers(0, 1, size=shape, endpoint=True).astype(bool)
    return rng.standard_normal(shape).astype(meta.dtype)


def _image_batch(image: np.ndarray, shape: list[int], dtype: np.dtype[Any]) -> np.ndarray:

    nchw = shape[1] == 3 and shape[3] != 3
    height, width = (shape[2], shape[3]) if nchw else (shape[1], shape[2])
    rgb = import_cv2().resize(image, (width, height))[:, :, ::-1]
    tensor = rgb.transpose(2, 0, 1) if nchw else rgb
    tensor = tensor.astype(dtype) if np.issubdtype(dtype, np.integer) else tensor.astype(dtype) / 255.0
    return np.ascontiguousarray(np.broadcast_to(tensor, (shape[0], *tensor.shape)))
