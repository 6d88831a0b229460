"""The run's control flags (stop, captures done, workers done) in a few bytes of shared memory.

multiprocessing.Event is a condition variable over semaphores: `set()` waits for every sleeper
to wake, so a sleeper that was SIGKILLed makes `set()` block forever. A flag here is one int64
that the parent writes and the stages poll; nothing can be left held by a dead process.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from multiprocessing import shared_memory

import numpy as np

from .shared_segments import segment_name

POLL_SECONDS = 0.005
_FLAGS = ("stop", "captures_done", "workers_done")


class SharedFlag:
    """A flag other processes see; offers what threading.Event offers to its waiters."""

    def __init__(self, cells: np.ndarray, index: int):
        self._cells, self._index = cells, index

    def set(self) -> None:
        self._cells[self._index] = 1

    def clear(self) -> None:
        self._cells[self._index] = 0

    def is_set(self) -> bool:
        return bool(self._cells[self._index])

    def wait(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.is_set():
            left = POLL_SECONDS if deadline is None else min(POLL_SECONDS, deadline - time.monotonic())
            if left <= 0:
                return False
            time.sleep(left)
        return True


@dataclass(frozen=True)
class ControlHandle:
    """What a stage needs to attach to the run's flags."""

    name: str


class RunControl:
    """Create in the parent with `RunControl.create(token)`; stages `attach(handle)`."""

    def __init__(self, segment: shared_memory.SharedMemory, owner: bool):
        self.segment, self.owner = segment, owner
        self._cells = np.ndarray((len(_FLAGS),), dtype=np.int64, buffer=segment.buf)
        self.stop, self.captures_done, self.workers_done = (SharedFlag(self._cells, i) for i in range(len(_FLAGS)))

    @classmethod
    def create(cls, token: str) -> RunControl:
        segment = shared_memory.SharedMemory(name=segment_name(token, "control"), create=True, size=8 * len(_FLAGS))
        control = cls(segment, owner=True)
        control._cells[:] = 0
        return control

    @classmethod
    def attach(cls, handle: ControlHandle) -> RunControl:
        return cls(shared_memory.SharedMemory(name=handle.name, create=False), owner=False)

    @property
    def handle(self) -> ControlHandle:
        return ControlHandle(self.segment.name)

    def close(self) -> None:
        del self._cells
        self.stop = self.captures_done = self.workers_done = None  # type: ignore[assignment]
        with contextlib.suppress(Exception):
            self.segment.close()
        if self.owner:
            with contextlib.suppress(FileNotFoundError):
                self.segment.unlink()
