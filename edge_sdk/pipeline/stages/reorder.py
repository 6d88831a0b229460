"""Putting results back in frame order (files) or dropping stale ones (live sources)."""

from __future__ import annotations

from collections.abc import Callable

from edge_sdk.sources.spec import BufferPolicy

from ..messages import InferenceDone


class Reorder:
    """Results of one source can arrive out of order: several workers, or a frame redone after the
    worker that had it died. The ring knows which frames are still on their way, so nothing waits
    on a timer:

    - files (block policy) go out in frame order: a result waits while an older frame of its source
      is still in the ring (READY, or claimed by a worker);
    - live sources (latest policy) go out at once; a result no newer than one already delivered
      is stale and is dropped. With `older_claimed` (the pipeline's dispatch may hand a frame's
      result back long after newer ones: offload), a live result waits while an older frame of its
      source is being inferred, so none is dropped as overtaken; frames still waiting in the ring
      are not waited for.

    A result no newer than the source's last delivered frame is dropped for either policy: for a file
    that is a frame delivered before a stage restart and redone.
    """

    def __init__(
        self,
        policies: list[BufferPolicy],
        older_in_flight: Callable[[int], int | None],
        delivered_through: Callable[[int], int],
        older_claimed: Callable[[int], int | None] | None = None,
    ):
        self.ordered = [policy == BufferPolicy.BLOCK for policy in policies]
        self.older_in_flight = older_in_flight
        """Lowest frame index of a source in the ring and not yet here (None if none)."""
        self.older_claimed = older_claimed
        """Lowest frame index of a source being inferred and not yet here (None if none)."""
        self.delivered_through = delivered_through
        self.waiting: list[dict[int, InferenceDone]] = [{} for _ in policies]

    def push(self, done: InferenceDone) -> tuple[list[InferenceDone], list[InferenceDone]]:
        """(results to deliver now, results to drop)."""
        index = done.source_index
        if done.frame.index <= self.delivered_through(index) or done.frame.index in self.waiting[index]:
            return [], [done]
        if not self.ordered[index] and self.older_claimed is None:
            return [done], []
        self.waiting[index][done.frame.index] = done
        return self._release(index), []

    def due(self) -> list[InferenceDone]:
        """Results whose older frames have arrived (or were given up) since they were pushed."""
        out = []
        for index in range(len(self.waiting)):
            out += self._release(index)
        return out

    def flush(self) -> tuple[list[InferenceDone], list[InferenceDone]]:
        """At the end: (results to deliver, results to drop). After a stop an older frame may never
        come; what waits behind it is dropped, so a file's results stay a gapless prefix."""
        deliver, drop = [], []
        for index, waiting in enumerate(self.waiting):
            expected = self.delivered_through(index) + 1
            for seq, done in sorted(waiting.items()):
                if not self.ordered[index]:  # a live source's numbers have gaps (frames the ring dropped)
                    deliver.append(done)
                elif seq == expected:
                    deliver.append(done)
                    expected += 1
                else:
                    drop.append(done)
            waiting.clear()
        return deliver, drop

    def _release(self, index: int) -> list[InferenceDone]:
        waiting = self.waiting[index]
        if not waiting:
            return []
        if self.ordered[index] or self.older_claimed is None:
            older = self.older_in_flight(index)
        else:
            older = self.older_claimed(index)
        out = [waiting.pop(seq) for seq in sorted(waiting) if older is None or seq < older]
        return out
