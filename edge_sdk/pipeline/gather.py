"""How an inference worker claims its next batch of frames from the sources' rings.

- `FillGatherer` (default): up to `runtime.batch_size` frames, waiting up to `batch_timeout_ms` for the
  batch to fill.
- `SloGatherer` (`runtime.latency_slo_ms`): what an `SloBatcher` decides from the ready frames' ages
  and the arrival rate; frames it sheds are dropped from their rings and counted (the run's
  `dropped`, and `shed` in the stage's report).

A live source's frame ages from when it was written to its ring; a file's frames wait in their ring
by design, so they count as just arrived.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Protocol

from edge_sdk.serving.batching import SloBatcher
from edge_sdk.sources.spec import BufferPolicy

from .frame_ring import FrameRing, SlotInfo, monotonic
from .frame_steps import FrameInference
from .stages.common import RingHandle

Batch = list[tuple[int, SlotInfo]]
"""(ring index, claimed slot) per frame."""
POLL_SECONDS = 0.0005


class Gatherer(Protocol):
    def __call__(self, rings: list[FrameRing], first: int) -> Batch:
        """The next batch, claimed; [] when nothing is ready. `first`: the ring to look at first."""
        ...

    def ran(self, frames: int, seconds: float) -> None:
        """A batch of `frames` took `seconds` from its claim to its results handed on."""
        ...

    def stats(self) -> dict[str, Any]: ...


class FillGatherer:
    def __init__(self, owner: int, batch_size: int, timeout_s: float, handles: Sequence[RingHandle]):
        self.owner, self.batch_size, self.timeout_s, self.handles = owner, batch_size, timeout_s, handles

    def __call__(self, rings: list[FrameRing], first: int) -> Batch:
        batch: Batch = []
        deadline = time.monotonic() + self.timeout_s
        while True:
            for offset in range(len(rings)):
                index = (first + offset) % len(rings)
                room = self.batch_size - len(batch)
                if room <= 0:
                    return batch
                newest = self.handles[index].policy == BufferPolicy.LATEST
                batch += [(index, info) for info in rings[index].take_ready(self.owner, newest, room)]
            if len(batch) >= self.batch_size or not batch or time.monotonic() >= deadline:
                return batch
            time.sleep(POLL_SECONDS)

    def ran(self, frames: int, seconds: float) -> None:
        pass

    def stats(self) -> dict[str, Any]:
        return {}


class SloGatherer:
    def __init__(self, owner: int, slo: SloBatcher, handles: Sequence[RingHandle], workers: int, infer: FrameInference):
        self.owner, self.slo, self.handles, self.infer = owner, slo, handles, infer
        self.share = 1.0 / workers
        self._written: int | None = None
        self.batches = self.frames = 0

    def __call__(self, rings: list[FrameRing], first: int) -> Batch:
        while True:
            now = monotonic()
            self._count_arrivals(rings, now)
            waiting = self._waiting(rings, now)
            if not waiting:
                return []
            decision = self.slo.decide([age for age, _index in waiting], now * 1000)
            if decision.shed:
                self._drop(rings, [index for _age, index in waiting[: decision.shed]])
            if decision.take:
                chosen = [index for _age, index in waiting[decision.shed : decision.shed + decision.take]]
                return self._claim(rings, chosen)
            if not decision.wait_ms:
                continue  # the shed frames are gone: decide on what is left
            time.sleep(min(decision.wait_ms / 1000, POLL_SECONDS))

    def ran(self, frames: int, seconds: float) -> None:
        self.slo.ran(frames, seconds * 1000)
        self.batches += 1
        self.frames += frames

    def stats(self) -> dict[str, Any]:
        slo = self.slo
        rows = self.infer.rows
        return {
            "batching": {
                "slo_ms": slo.slo_ms,
                "mean_batch": self.frames / self.batches if self.batches else 0.0,
                "shed": slo.shed,
                "padded": self.infer.padded_rows,
                "padding_share": self.infer.padded_rows / rows if rows else 0.0,
            }
        }

    def _count_arrivals(self, rings: list[FrameRing], now: float) -> None:
        written = sum(ring.written for ring in rings)
        if self._written is not None and written > self._written:
            self.slo.arrivals.arrived((written - self._written) * self.share, now * 1000)
        self._written = written

    def _waiting(self, rings: list[FrameRing], now: float) -> list[tuple[float, int]]:
        """(age in ms, ring index) of each frame that could be claimed, oldest first."""
        waiting = []
        for index, ring in enumerate(rings):
            stamps = ring.ready_timestamps()
            if self.handles[index].policy == BufferPolicy.LATEST:
                stamps = stamps[-1:]  # the older ones are stale and dropped when the newest is claimed
            live = self.handles[index].live
            waiting += [((now - stamp) * 1000 if live else 0.0, index) for stamp in stamps]
        waiting.sort(key=lambda item: -item[0])
        return waiting

    def _claim(self, rings: list[FrameRing], indices: list[int]) -> Batch:
        batch: Batch = []
        for index in sorted(set(indices)):
            newest = self.handles[index].policy == BufferPolicy.LATEST
            batch += [(index, info) for info in rings[index].take_ready(self.owner, newest, indices.count(index))]
        return batch

    def _drop(self, rings: list[FrameRing], indices: list[int]) -> None:
        for index, info in self._claim(rings, indices):
            rings[index].release(info.slot)
            rings[index].count_dropped()
