"""How the planner times things and makes what each mode sends: medians after a warm-up, outputs as a
batch of one, the answer's encoding, and cloud mode's downscaled JPEG frame."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

import numpy as np

from edge_sdk.core.errors import ConfigError
from edge_sdk.core.opencv import import_cv2
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


# A stand-in for cloud_offload/frame_codec.py (being written): OpenCV's JPEG, as cloud mode sends it.
def downscale(frame: np.ndarray, side: int | None) -> np.ndarray:
    """`frame` with its longer side at most `side` (INTER_AREA), the aspect ratio kept."""
    longer = max(frame.shape[:2])
    if side is None or longer <= side:
        return frame
    cv2 = import_cv2()
    scale = side / longer
    size = (max(1, round(frame.shape[1] * scale)), max(1, round(frame.shape[0] * scale)))
    return np.asarray(cv2.resize(frame, size, interpolation=cv2.INTER_AREA))


def encode_jpeg(frame: np.ndarray, quality: int) -> bytes:
    cv2 = import_cv2()
    ok, data = cv2.imencode(".jpg", frame, [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise ConfigError(f"OpenCV could not encode a {frame.shape} frame as JPEG")
    return bytes(data)


def decode_jpeg(data: bytes) -> np.ndarray:
    cv2 = import_cv2()
    return np.asarray(cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR))
