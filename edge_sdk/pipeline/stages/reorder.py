"""Putting results of several inference workers back in order (files) or dropping stale ones (live)."""

from __future__ import annotations

import time
from collections.abc import Callable

from edge_sdk.sources.spec import BufferPolicy

from ..messages import InferenceDone


class Reorder:
    """With several inference workers, results of one source can arrive out of order.

    Files (block policy) are put back in order; a gap (a frame lost with a crashed worker) is skipped
    once later frames have waited `patience` seconds. Live sources (latest policy) have gaps by
    design, so nothing waits: a result older than one already delivered is stale and is dropped.
    """

    def __init__(
        self,
        policies: list[BufferPolicy],
        workers: int,
        oldest_pending: Callable[[int], int | None],
        patience: float = 1.0,
    ):
        self.ordered = [workers > 1 and policy == BufferPolicy.BLOCK for policy in policies]
        self.oldest_pending = oldest_pending
        """Lowest frame index of a source still in flight: where its order starts (also after a restart)."""
        self.patience = patience
        self.expected: list[int | None] = [None] * len(policies)
        self.waiting: list[dict[int, tuple[float, InferenceDone]]] = [{} for _ in policies]

    def push(self, done: InferenceDone) -> tuple[list[InferenceDone], list[InferenceDone]]:
        """(results to deliver now, stale results to drop)."""
        index = done.source_index
        if not self.ordered[index]:
            expected = self.expected[index]
            if expected is not None and done.frame.index < expected:
                return [], [done]
            self.expected[index] = done.frame.index + 1
            return [done], []
        if self.expected[index] is None:
            self.expected[index] = self.oldest_pending(index)
        self.waiting[index][done.frame.index] = (time.monotonic(), done)
        return self._release(index), []

    def due(self) -> list[InferenceDone]:
        """Results whose wait for a missing predecessor has run out."""
        out = []
        for index in range(len(self.waiting)):
            out += self._release(index)
        return out

    def flush(self) -> list[InferenceDone]:
        out = []
        for waiting in self.waiting:
            out += [done for _, (_, done) in sorted(waiting.items())]
            waiting.clear()
        return out

    def _release(self, index: int) -> list[InferenceDone]:
        waiting, out = self.waiting[index], []
        while waiting:
            expected = self.expected[index]
            oldest = min(waiting)
            if expected is None or oldest == expected or time.monotonic() - waiting[oldest][0] > self.patience:
                out.append(waiting.pop(oldest)[1])
                self.expected[index] = oldest + 1
            else:
                break
        return out
