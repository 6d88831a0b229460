"""How many restarts a stage may have: so many within a sliding window."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable


class RestartBudget:
    def __init__(self, max_restarts: int, window_seconds: float, clock: Callable[[], float] = time.monotonic):
        self.max_restarts = max_restarts
        self.window_seconds = window_seconds
        self.clock = clock
        self._restarts: deque[float] = deque()

    def allow(self) -> bool:
        """Spend one restart if the budget has one left in the current window."""
        now = self.clock()
        while self._restarts and now - self._restarts[0] > self.window_seconds:
            self._restarts.popleft()
        if len(self._restarts) >= self.max_restarts:
            return False
        self._restarts.append(now)
        return True

    @property
    def used(self) -> int:
        return len(self._restarts)
