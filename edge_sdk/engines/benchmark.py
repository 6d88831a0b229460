"""Latency and throughput of an engine per batch size, after warm-up."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from edge_sdk.errors import ConfigError

from .runner import EngineRunner
from .tensor_meta import TensorMeta


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
    """Time `runner.infer` on generated inputs (or `image`, a BGR frame, for image inputs)."""
    if warmup < 0 or iterations < 1 or any(b < 1 for b in batch_sizes):
        raise ConfigError(
            f"expected warmup >= 0, iterations >= 1, batches >= 1; got {warmup}, {iterations}, {batch_sizes}"
        )
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
    from edge_sdk.sources.opencv import import_cv2

    nchw = shape[1] == 3 and shape[3] != 3
    height, width = (shape[2], shape[3]) if nchw else (shape[1], shape[2])
    rgb = import_cv2().resize(image, (width, height))[:, :, ::-1]
    tensor = rgb.transpose(2, 0, 1) if nchw else rgb
    tensor = tensor.astype(dtype) if np.issubdtype(dtype, np.integer) else tensor.astype(dtype) / 255.0
    return np.ascontiguousarray(np.broadcast_to(tensor, (shape[0], *tensor.shape)))
