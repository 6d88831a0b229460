"""One frame's path, the same in both runtimes: feed -> engine -> post-process where the engine runs
(the inline loop, an inference worker), then cascade -> sinks where the frame's pixels and the sinks
are (the inline loop, the output stage). Raw engine outputs never leave the first half: what travels
on is the `Result`, small whatever the size of the model's head.

Every Result's `timings_ms` has the fields of `TIMING_FIELDS`, meaning the same in both runtimes
(docs/architecture.md, "One frame"):

- preprocess: turning this frame into its engine input (`core/preprocess.py`'s feed);
- infer: this frame's share of the engine call that computed it (the call's time / `batch`);
- batch: frames in that engine call (1 inline; frames of one shape batched across sources otherwise);
- postprocess: the post-processor on this frame's outputs;
- cascade: the cascade on this frame's detections (0 without a cascade);
- queued: waiting for inference: from being written to its ring to its engine call, in the
  multi-process runtime (a free worker, then its batch filling up to `batch_timeout_ms`; 0 inline,
  where the frame goes straight from the source to the engine);
- total: from the frame being in hand (the source returned it inline; written to its ring in the
  multi-process runtime, so `queued` and the way to the output stage count) to its result being
  ready for the sinks.

The run's latency (`latency_ms`) is `total`, less `queued` for a source that is read ahead (a file
or a folder: its frames wait in the ring by design, and that wait says nothing about the pipeline);
a live source's wait is latency and counts, whatever its `buffer:` policy.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

import numpy as np

from edge_sdk.backends.runner import EngineRunner
from edge_sdk.core.preprocess import FrameFeed
from edge_sdk.core.results import Frame, Result
from edge_sdk.postprocess import Postprocessor
from edge_sdk.sinks import SinkFanout

from .cascade import Cascade, NoCascade
from .frame_ring import monotonic

TIMING_FIELDS = ("preprocess", "infer", "batch", "postprocess", "cascade", "queued", "total")


def latency_ms(timings_ms: dict[str, float], read_ahead: bool) -> float:
    """A frame's latency as the run reports it: `total`, without the ring wait of a read-ahead source."""
    return timings_ms["total"] - (timings_ms.get("queued", 0.0) if read_ahead else 0.0)


class FrameInference:
    """Frames in hand -> one Result each: feed, engine, post-process."""

    def __init__(self, runner: EngineRunner, input_name: str, feed: FrameFeed, postprocess: Postprocessor):
        self.runner, self.input_name, self.feed, self.postprocess = runner, input_name, feed, postprocess
        first = next((meta.shape[0] for meta in runner.inputs if meta.name == input_name and meta.shape), None)
        self.fixed_batch = first if isinstance(first, int) else None
        """The engine's batch axis when it was built fixed (a static profile): calls are padded to it."""
        self.padded_rows = 0
        """Empty rows run to fill fixed-size calls: what a static batch costs."""
        self.rows = 0
        """Rows the engine ran, padding included."""

    def __call__(self, frames: Sequence[Frame], queued_ms: Sequence[float] | None = None) -> list[Result]:
        """Results in the order of `frames`, with every timing field but cascade and total; `queued_ms`:
        how long each frame waited for this call (none: 0). Frames whose engine inputs have the same
        shape share one engine call; frames of different sizes (raw frames for a folded engine, or no
        resize) cannot share a tensor and get one call per shape."""
        tensors, preprocess_ms = [], []
        for frame in frames:
            started = time.perf_counter()
            tensors.append(self.feed(frame.image))
            preprocess_ms.append(_ms_since(started))
        groups: dict[tuple[int, ...], list[int]] = {}
        for position, tensor in enumerate(tensors):
            groups.setdefault(tensor.shape, []).append(position)
        results: list[Result | None] = [None] * len(frames)
        for positions in groups.values():
            started = time.perf_counter()
            stacked = np.concatenate([tensors[p] for p in positions]) if len(positions) > 1 else tensors[positions[0]]
            outputs = self._infer(stacked)
            infer_ms = _ms_since(started) / len(positions)
            for row, position in enumerate(positions):
                meta = frames[position].meta
                started = time.perf_counter()
                result = self.postprocess(
                    {name: value[row] for name, value in outputs.items()},
                    meta,
                    self.feed.geometry(meta.width, meta.height),
                )
                timings = {
                    "preprocess": preprocess_ms[position],
                    "infer": infer_ms,
                    "batch": float(len(positions)),
                    "postprocess": _ms_since(started),
                    "queued": queued_ms[position] if queued_ms is not None else 0.0,
                }
                results[position] = dataclasses.replace(result, timings_ms=timings)
        return [result for result in results if result is not None]

    def _infer(self, stacked: np.ndarray) -> dict[str, np.ndarray]:
        """One engine call, or, on a fixed batch axis, one call per `fixed_batch` rows with the last
        padded by repeating its final frame (a real frame keeps every row's numbers in range)."""
        size = self.fixed_batch
        self.rows += len(stacked)
        if size is None or len(stacked) == size:
            return self.runner.infer({self.input_name: stacked})
        parts: list[dict[str, np.ndarray]] = []
        for start in range(0, len(stacked), size):
            chunk = stacked[start : start + size]
            missing = size - len(chunk)
            if missing:
                chunk = np.concatenate([chunk, np.repeat(chunk[-1:], missing, axis=0)])
                self.padded_rows += missing
                self.rows += missing
            outputs = self.runner.infer({self.input_name: chunk})
            parts.append({name: value[: size - missing] for name, value in outputs.items()})
        return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}


class FrameDelivery:
    """A frame's Result and pixels -> the cascade, the total, the sinks."""

    def __init__(self, cascade: Cascade | NoCascade, sinks: SinkFanout):
        self.cascade, self.sinks = cascade, sinks

    def __call__(self, result: Result, image: np.ndarray, in_hand_at: float) -> tuple[Result, float]:
        """(the Result as the sinks got it, seconds the sinks took). `in_hand_at`: the `monotonic()`
        reading when the frame was in hand."""
        started = time.perf_counter()
        result = self.cascade(result, image)
        timings = dict(result.timings_ms, cascade=_ms_since(started), total=(monotonic() - in_hand_at) * 1000)
        result = dataclasses.replace(result, timings_ms=timings)
        written = time.perf_counter()
        self.sinks.write(result, image)
        return result, time.perf_counter() - written


def _ms_since(started: float) -> float:
    return (time.perf_counter() - started) * 1000
