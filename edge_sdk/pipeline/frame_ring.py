"""FrameRing: fixed slots of frame pixels in shared memory, handed between stage processes by id.

Each slot has a state, an owner and a sequence number in a small header array that lives in the
same segment; state changes happen under one lock per ring (a flock(2) lock on the segment, which
the kernel releases when a holder dies), pixels are written and read outside it through zero-copy
numpy views. A slot moves FREE -> WRITING (capture) -> READY -> IN_USE (inference) -> SENT (its outputs are on
their way to the output stage) -> IN_USE (output) -> FREE. Only slot ids and sequence numbers travel between processes.

The ring is the truth about every frame: when a stage dies, `recover` gives the frames it held
back (READY again, to be redone) unless their results were already delivered, so a file loses no
frame and delivers none twice.

The process that creates a ring unlinks it. Segment names carry the creator's pid, so a later
start can find and remove segments whose creator died (`remove_stale_segments`).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from enum import IntEnum
from multiprocessing import shared_memory

import numpy as np

from edge_sdk.core.errors import EdgeSDKError

from .process_lock import ProcessLock
from .shared_segments import SHM_DIR, remove_stale_segments, segment_name, segments_of

__all__ = ["FrameRing", "RingLayout", "SlotInfo", "SlotState", "remove_stale_segments", "segments_of"]
_COUNTERS = 6
"""written, dropped, delivered, highest delivered sequence number, skipped by the source, and
ready events (frames that became READY: committed or given back to be redone)."""


class SlotState(IntEnum):
    FREE = 0
    WRITING = 1
    READY = 2
    IN_USE = 3
    SENT = 4


@dataclass(frozen=True)
class RingLayout:
    """Sizes that fix where everything sits in the segment."""

    slots: int
    max_height: int
    max_width: int

    @property
    def frame_bytes(self) -> int:
        return self.max_height * self.max_width * 3

    # Header: per slot state(int64), owner(int64), seq(int64), height(int64), width(int64), timestamp(float64).
    @property
    def header_bytes(self) -> int:
        return self.slots * 6 * 8 + _COUNTERS * 8

    @property
    def total_bytes(self) -> int:
        return self.header_bytes + self.slots * self.frame_bytes


@dataclass(frozen=True)
class SlotInfo:
    slot: int
    seq: int
    height: int
    width: int
    timestamp: float


class FrameRing:
    """Create with `FrameRing.create(...)` in the parent; children `attach(name, layout)`."""

    def __init__(self, segment: shared_memory.SharedMemory, layout: RingLayout, owner: bool):
        self.segment = segment
        self.layout = layout
        self.lock = ProcessLock(SHM_DIR / segment.name)
        self.owner = owner
        n = layout.slots
        ints = np.ndarray((5, n), dtype=np.int64, buffer=segment.buf, offset=0)
        self._state, self._owner, self._seq, self._height, self._width = ints
        self._timestamp = np.ndarray((n,), dtype=np.float64, buffer=segment.buf, offset=5 * n * 8)
        self._counters = np.ndarray((_COUNTERS,), dtype=np.int64, buffer=segment.buf, offset=6 * n * 8)
        self._frames = np.ndarray(
            (n, layout.max_height, layout.max_width, 3), dtype=np.uint8, buffer=segment.buf, offset=layout.header_bytes
        )

    @classmethod
    def create(cls, layout: RingLayout, token: str, index: int = 0) -> FrameRing:
        name = segment_name(token, f"ring{index}")
        try:
            segment = shared_memory.SharedMemory(name=name, create=True, size=layout.total_bytes)
        except OSError as exc:
            raise EdgeSDKError(
                f"cannot create a {layout.total_bytes / 1e6:.0f} MB shared-memory frame ring ({exc.strerror}); "
                "lower runtime.ring_slots or the source's max_frame_size, or enlarge /dev/shm"
            ) from None
        ring = cls(segment, layout, owner=True)
        ring._state[:] = SlotState.FREE
        ring._owner[:] = -1
        ring._seq[:] = -1
        ring._counters[:] = 0
        ring._counters[3] = -1
        return ring

    @classmethod
    def attach(cls, name: str, layout: RingLayout) -> FrameRing:
        # Attaching registers the name with the resource tracker that spawned children share with
        # the creator; that is a no-op for a name it already holds, so the creator's unlink stays
        # the one that removes it (and the tracker cleans up if every process dies).
        segment = shared_memory.SharedMemory(name=name, create=False)
        return cls(segment, layout, owner=False)

    @property
    def name(self) -> str:
        return self.segment.name

    # -- writer side (capture) -----------------------------------------------------------------------

    def acquire_for_write(self, owner: int, drop_ready: bool) -> tuple[int | None, bool]:
        """A slot to write into, or None when every slot is busy. Returns (slot, dropped_a_ready_frame).

        With `drop_ready` (live sources) the oldest frame still waiting for inference is given up
        when no slot is free, so results never lag behind the camera.
        """
        with self.lock:
            free = np.flatnonzero(self._state == SlotState.FREE)
            dropped = False
            if free.size:
                slot = int(free[0])
            elif drop_ready and (ready := np.flatnonzero(self._state == SlotState.READY)).size:
                slot = int(ready[np.argmin(self._seq[ready])])
                self._counters[1] += 1
                dropped = True
            else:
                return None, False
            self._state[slot] = SlotState.WRITING
            self._owner[slot] = owner
            return slot, dropped

    @property
    def pixels(self) -> np.ndarray:
        """Every slot's pixel memory, (slots, max_height, max_width, 3) uint8, as one view."""
        return self._frames

    def frame_buffer(self, slot: int, height: int, width: int) -> np.ndarray:
        """Zero-copy view of a slot's pixels at the given size."""
        if height > self.layout.max_height or width > self.layout.max_width:
            raise EdgeSDKError(
                f"frame {width}x{height} does not fit the ring's {self.layout.max_width}x{self.layout.max_height} slots"
            )
        return self._frames[slot, :height, :width]

    def commit(self, slot: int, seq: int, height: int, width: int, timestamp: float) -> None:
        """Publish the frame written into `slot` (acquired with acquire_for_write) to the readers."""
        with self.lock:
            if self._state[slot] != SlotState.WRITING:
                raise EdgeSDKError(
                    f"ring {self.name}: slot {slot} is {SlotState(int(self._state[slot])).name}, not being written"
                )
            self._seq[slot] = seq
            self._height[slot] = height
            self._width[slot] = width
            self._timestamp[slot] = timestamp
            self._state[slot] = SlotState.READY
            self._owner[slot] = -1
            self._counters[0] += 1
            self._counters[5] += 1

    def count_dropped(self, frames: int = 1) -> None:
        """Count frames the writer gave up before they reached a slot."""
        with self.lock:
            self._counters[1] += frames

    # -- reader side (inference, output) -------------------------------------------------------------

    def take_ready(self, owner: int, newest: bool, limit: int) -> list[SlotInfo]:
        """Claim up to `limit` READY slots: oldest first (files), or only the newest (live sources,
        where older waiting frames are stale and are dropped and counted)."""
        with self.lock:
            ready = np.flatnonzero(self._state == SlotState.READY)
            if not ready.size or limit <= 0:
                return []
            order = ready[np.argsort(self._seq[ready])]
            if newest:
                stale = order[:-1]
                self._state[stale] = SlotState.FREE
                self._owner[stale] = -1
                self._counters[1] += stale.size
                chosen = order[-1:]
            else:
                chosen = order[:limit]
            self._state[chosen] = SlotState.IN_USE
            self._owner[chosen] = owner
            return [
                SlotInfo(
                    int(s), int(self._seq[s]), int(self._height[s]), int(self._width[s]), float(self._timestamp[s])
                )
                for s in chosen
            ]

    def ready_timestamps(self) -> list[float]:
        """When each READY frame was written (`monotonic()`), oldest first; nothing is claimed."""
        with self.lock:
            ready = np.flatnonzero(self._state == SlotState.READY)
            return sorted(float(stamp) for stamp in self._timestamp[ready])

    def frame(self, info: SlotInfo) -> np.ndarray:
        """The pixels of a claimed slot (a view; valid until the slot is released)."""
        return self._frames[info.slot, : info.height, : info.width]

    def mark_sent(self, slot: int, seq: int, holder: int) -> bool:
        """The worker `holder` is about to send this frame's outputs to the output stage.

        From here until the output stage takes the slot over, the message may die with either
        process: if the output stage dies, `recover(..., sent=True)` gives every SENT frame back."""
        with self.lock:
            if self._state[slot] != SlotState.IN_USE or self._owner[slot] != holder or self._seq[slot] != seq:
                return False
            self._state[slot] = SlotState.SENT
            return True

    def take_over(self, slot: int, seq: int, holder: int, owner: int) -> bool:
        """Move a SENT slot from `holder` to `owner` if `holder` still has that frame there.

        False means the message about it is stale: its sender or an earlier output stage died and
        the frame went back to the ring (it may be redone by another worker, or already be)."""
        with self.lock:
            if self._state[slot] != SlotState.SENT or self._owner[slot] != holder or self._seq[slot] != seq:
                return False
            self._state[slot] = SlotState.IN_USE
            self._owner[slot] = owner
            return True

    def release(self, slot: int, delivered: bool = False) -> None:
        """Free a slot; `delivered` counts its frame as having reached the sinks. A slot already free
        (released twice) is left as it is and counts nothing."""
        with self.lock:
            if self._state[slot] == SlotState.FREE:
                return
            self._state[slot] = SlotState.FREE
            self._owner[slot] = -1
            if delivered:
                self._counters[2] += 1
                self._counters[3] = max(self._counters[3], self._seq[slot])

    def recover(self, owner: int, sent: bool = False, latest: bool = False, clean: bool = False) -> tuple[int, int]:
        """Take back the slots of `owner`, a stage that ended: (frames to redo, slots freed).

        A frame it was writing is incomplete and freed; a frame it held after capture goes back
        to READY, unless a frame at least as new was already delivered. For a file (delivered in
        order) that frame was delivered; for a `latest`-policy source (a live one) it was
        overtaken, and it is counted as dropped. `sent` (the output stage died) also takes back
        every SENT frame: its message may have been waiting in the dead process's socket. After a
        `clean` exit the owner's SENT frames stay SENT: every message it sent is through, and the
        output stage takes them over."""
        with self.lock:
            held = self._owner == owner
            if clean:
                held &= self._state != SlotState.SENT
            if sent:
                held |= self._state == SlotState.SENT
            writing = held & (self._state == SlotState.WRITING)
            overtaken = held & ~writing & (self._seq <= self._counters[3])
            free = writing | overtaken
            redo = held & ~free
            self._state[free] = SlotState.FREE
            self._state[redo] = SlotState.READY
            self._owner[held] = -1
            if latest:
                self._counters[1] += int(overtaken.sum())
            self._counters[5] += int(redo.any())
            return int(redo.sum()), int(free.sum())

    # -- bookkeeping ---------------------------------------------------------------------------------

    @property
    def written(self) -> int:
        return int(self._counters[0])

    @property
    def dropped(self) -> int:
        return int(self._counters[1])

    @property
    def delivered(self) -> int:
        """Frames whose results reached the sinks (kept in shared memory, so a stage crash loses no count)."""
        return int(self._counters[2])

    @property
    def delivered_through(self) -> int:
        """The highest sequence number delivered so far (-1 before the first)."""
        return int(self._counters[3])

    @property
    def ready_events(self) -> int:
        """Grows whenever a frame becomes READY. Read without the lock (one aligned int64): a reader
        that found nothing ready need not look again, under the lock, until this has changed."""
        return int(self._counters[5])

    @property
    def skipped(self) -> int:
        """Frames the source could not decode and skipped (reported by the capture stage)."""
        return int(self._counters[4])

    def count_skipped(self, frames: int) -> None:
        with self.lock:
            self._counters[4] += frames

    def oldest_pending_seq(self, other_than: int | None = None, claimed_only: bool = False) -> int | None:
        """The lowest sequence number among frames committed but not yet released (None if none),
        leaving out the frames `other_than` holds; with `claimed_only`, among frames a stage has
        claimed (being inferred, or their results on the way), not those still waiting to be."""
        with self.lock:
            pending = (self._state == SlotState.IN_USE) | (self._state == SlotState.SENT)
            if not claimed_only:
                pending |= self._state == SlotState.READY
            if other_than is not None:
                pending &= self._owner != other_than
            return int(self._seq[pending].min()) if pending.any() else None

    def last_seq(self) -> int:
        """The highest sequence number committed so far (-1 before the first)."""
        with self.lock:
            return int(self._seq.max())

    def states(self) -> dict[str, int]:
        with self.lock:
            return {state.name.lower(): int((self._state == state).sum()) for state in SlotState}

    def close(self) -> None:
        """Detach; the creator also unlinks the segment. Closing twice does nothing."""
        if not hasattr(self, "_frames"):
            return
        # numpy views keep the buffer exported; drop them before closing the mapping.
        del self._state, self._owner, self._seq, self._height, self._width, self._timestamp, self._counters
        del self._frames
        self.lock.close()
        with contextlib.suppress(Exception):
            self.segment.close()
        if self.owner:
            with contextlib.suppress(FileNotFoundError):
                self.segment.unlink()


def monotonic() -> float:
    """The clock every stage stamps frames with (system-wide on Linux, so comparable across processes)."""
    return time.monotonic()
