"""The ways a frame can be computed, as the agent runs them: what each sends and what it costs now.

Each remote mode turns a frame into a request (`request`) and keeps a live `ModeCost`: its edge
work and bytes are running means of what it did, its cloud time what the workers report (their load
report, then each answer's own timing). Until a mode has run, its costs are the ones measured at
start-up on the shipped scene frame.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from edge_sdk.backends.runner import EngineRunner

from . import tensor_codec
from .config import ImageSettings, TensorSettings
from .cost_model import CLOUD, EDGE, ModeCost
from .frame_codec import encode_frame
from .protocol import IMAGE_TENSOR, WHOLE

if TYPE_CHECKING:  # the graph tools (onnx) load only for a pipeline that splits
    from .split_engines import SplitCandidate, SplitModel

MEAN_WEIGHT = 0.2
"""Weight of the newest sample in a mode's running means."""
QUALITY_STEP = 5
QUALITY_UTILISATION = 0.7
"""`quality: auto` sizes the frame to this share of what the link carries in a frame interval: a link
kept fully busy queues every frame behind the last (cost_model's M/D/1 wait grows without bound)."""
CORRECTION_HALF_LIFE_S = 3.0


@dataclass
class RunningMean:
    value: float

    def add(self, sample: float) -> None:
        self.value += MEAN_WEIGHT * (sample - self.value)


@dataclass
class LiveCost:
    """A mode's costs as they are now (milliseconds, bytes)."""

    name: str
    part: str | None
    edge_ms: RunningMean
    up_bytes: RunningMean = field(default_factory=lambda: RunningMean(0.0))
    down_bytes: RunningMean = field(default_factory=lambda: RunningMean(0.0))
    cloud_ms: RunningMean | None = None
    """None until a worker reported it (the mode is unavailable until then)."""
    correction: RunningMean = field(default_factory=lambda: RunningMean(1.0))
    """Observed over expected latency of this mode's answers: what the cost model misses (kept in 0.5-2).
    It fades back to 1 while the mode is not used (`correction_now`), so one bad spell does not keep
    a mode out for good."""
    corrected_at: float = 0.0

    def cost(self) -> ModeCost:
        return ModeCost(
            self.name,
            self.part,
            self.edge_ms.value,
            round(self.up_bytes.value),
            round(self.down_bytes.value),
            self.cloud_ms.value if self.cloud_ms is not None else 0.0,
        )

    def observe_cloud(self, ms: float) -> None:
        if self.cloud_ms is None:
            self.cloud_ms = RunningMean(ms)
        else:
            self.cloud_ms.add(ms)

    def observe_latency(self, observed_ms: float, expected_ms: float, now: float) -> None:
        if expected_ms > 0:
            self.correction.value = self.correction_now(now)
            self.correction.add(min(2.0, max(0.5, observed_ms / expected_ms)))
            self.corrected_at = now

    def correction_now(self, now: float) -> float:
        fade = 0.5 ** (max(0.0, now - self.corrected_at) / CORRECTION_HALF_LIFE_S)
        return 1.0 + (self.correction.value - 1.0) * fade


@dataclass(frozen=True)
class Request:
    part: str
    tensors: dict[str, np.ndarray]
    precision: tensor_codec.Precision
    compression: tensor_codec.Compression
    edge_ms: float


class CloudMode:
    """The frame, downscaled to `max_side` (None: as it is) and encoded; the worker runs it all.

    With `quality: auto`, the quality is the highest from max_quality down to min_quality (steps of
    5) whose frame takes at most QUALITY_UTILISATION of one frame interval on the link, so the link
    does not queue frames;
    sizes per quality are scaled from the last frame's."""

    def __init__(self, settings: ImageSettings, max_side: int | None, sample: np.ndarray, down_bytes: float):
        self.settings, self.max_side = settings, max_side
        self.quality = settings.max_quality if settings.quality == "auto" else settings.quality
        self._encoded(sample)  # the first encode loads the codec: not a sample of its cost
        first = self._encoded(sample)
        self.cost = LiveCost(
            CLOUD,
            WHOLE,
            RunningMean(first.edge_ms),
            RunningMean(first.tensors[IMAGE_TENSOR].size),
            RunningMean(down_bytes),
        )

    def request(self, image: np.ndarray) -> Request:
        request = self._encoded(image)
        self.cost.edge_ms.add(request.edge_ms)
        return request

    def _encoded(self, image: np.ndarray) -> Request:
        started = time.perf_counter()
        data = encode_frame(image, self.max_side, self.quality, self.settings.format)
        ms = (time.perf_counter() - started) * 1000
        return Request(WHOLE, {IMAGE_TENSOR: np.frombuffer(data, np.uint8)}, "fp32", "none", ms)

    def adapt_quality(self, bandwidth_bps: float | None, frame_interval_s: float) -> None:
        if self.settings.quality != "auto" or bandwidth_bps is None or frame_interval_s <= 0:
            return
        budget = QUALITY_UTILISATION * bandwidth_bps / 8 * frame_interval_s
        size_now = max(1.0, self.cost.up_bytes.value)
        quality = self.settings.max_quality
        # JPEG's size grows about linearly with quality over 50-95; scale from the current one.
        while quality > self.settings.min_quality and size_now * quality / self.quality > budget:
            quality -= QUALITY_STEP
        self.quality = max(self.settings.min_quality, quality)


class SplitMode:
    """The head here on the host-preprocessed frame; the cut's tensors go; the worker runs the tail."""

    def __init__(
        self,
        split: SplitModel,
        candidate: SplitCandidate,
        head: EngineRunner,
        settings: TensorSettings,
        sample: np.ndarray,
        down_bytes: float,
    ):
        self.split, self.candidate, self.head, self.settings = split, candidate, head, settings
        self.outputs = list(candidate.measured.cut.tensors)
        self._head_request(sample)  # the first run of an engine is slow: not a sample of its cost
        first = self._head_request(sample)
        self.cost = LiveCost(
            candidate.name,
            candidate.part,
            RunningMean(first.edge_ms),
            RunningMean(_encoded_size(first)),
            RunningMean(down_bytes),
        )

    def request(self, image: np.ndarray) -> Request:
        request = self._head_request(image)
        self.cost.edge_ms.add(request.edge_ms)
        return request

    def _head_request(self, image: np.ndarray) -> Request:
        started = time.perf_counter()
        values = self.head.infer({self.split.input.name: self.split.preprocess(image)})
        tensors = {name: np.asarray(values[name]) for name in self.outputs}
        ms = (time.perf_counter() - started) * 1000
        return Request(self.candidate.part, tensors, self.settings.precision, self.settings.compression, ms)


def edge_cost(edge_ms: float) -> LiveCost:
    return LiveCost(EDGE, None, RunningMean(edge_ms))


def _encoded_size(request: Request) -> int:
    payload = tensor_codec.TensorPayload(0, 0.0, request.tensors)
    return len(tensor_codec.encode(payload, request.precision, request.compression))
