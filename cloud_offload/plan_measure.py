"""How the planner times things and what it measures each mode with: medians after a warm-up, outputs
as a batch of one, the answer's encoding, the sizes cloud mode sends its frame at."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

import numpy as np

from edge_sdk.core.preprocess import PreprocessSpec
from edge_sdk.core.tensor_meta import TensorMeta

from . import tensor_codec
from .protocol import WORKER_MS_TENSOR

Outputs = dict[str, np.ndarray]
ANSWER_PRECISION: tensor_codec.Precision = "fp16"
"""Float outputs in an answer: the worker's default (`answer_precision`); the plan judges what the edge
decodes from it."""
Item = TypeVar("Item")
Result = TypeVar("Result")


def timed(
    items: Sequence[Item], warmup: int, repeats: int, once: Callable[[Item], tuple[Result, float]]
) -> tuple[list[Result], list[float]]:
    """`once` (a result and the milliseconds it took) on each item `repeats` times, after `warmup`
    untimed runs on the first: the first result per item, and every time."""
    for _ in range(warmup):
        once(items[0])
    results, times = [], []
    for item in items:
        for repeat in range(repeats):
            result, ms = once(item)
            times.append(ms)
            if repeat == 0:
                results.append(result)
    return results, times


def with_time(function: Callable[[Item], Result], item: Item) -> tuple[Result, float]:
    started = time.perf_counter()
    return function(item), ms_since(started)


def ms_since(started: float) -> float:
    return (time.perf_counter() - started) * 1000.0


def first_item(outputs: Outputs) -> Outputs:
    """Batch item 0 of each output, still as a batch of one (the accuracy metric's form)."""
    return {name: value[:1] if np.ndim(value) else value for name, value in outputs.items()}


def mean_bytes(sizes: Iterable[int]) -> int:
    numbers = list(sizes)
    return round(sum(numbers) / len(numbers)) if numbers else 0


def answered(outputs: Outputs) -> tuple[int, Outputs]:
    """What a worker's answer costs and what the edge reads from it: the message's bytes (the model's
    outputs and the worker's times at ANSWER_PRECISION, zstd), and the outputs decoded from it."""
    tensors = {**outputs, WORKER_MS_TENSOR: np.zeros(2, np.float32)}
    data = tensor_codec.encode(tensor_codec.TensorPayload(0, 0.0, tensors), ANSWER_PRECISION, "zstd")
    decoded = tensor_codec.decode(data).tensors
    return len(data), {name: decoded[name] for name in outputs}


def max_side(spec: PreprocessSpec, model_input: TensorMeta) -> int | None:
    """The model input's longer side, which cloud mode downscales frames to: the pipeline's resize,
    else the input's fixed height and width; None when neither is known (frames go at their size)."""
    if spec.resize:
        return max(spec.resize)
    shape = model_input.shape
    if len(shape) != 4:
        return None
    sides = shape[2:] if spec.layout == "nchw" else shape[1:3]
    fixed = [side for side in sides if isinstance(side, int)]
    return max(fixed) if len(fixed) == 2 else None


def cloud_sides(setting: int | str, model_side: int | None) -> list[int | None]:
    """The longer sides cloud mode is measured at: what `offload.image.max_side` sends (None: the
    camera's size), and the model input's longer side too when that differs, so the plan shows what
    shrinking the frame saves in bytes and costs in accuracy."""
    chosen = setting if isinstance(setting, int) else (model_side if setting == "model" else None)
    return list(dict.fromkeys([chosen, model_side]))
