"""How long to wait before each reconnect attempt: exponential backoff with a cap and jitter."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class BackoffPolicy:
    """Attempt n (1-based) waits `initial_delay * multiplier**(n-1)` seconds, capped at `max_delay`,
    then spread by +/- `jitter` (a fraction) so a fleet of cameras does not reconnect in lockstep.

    `max_attempts` counts attempts in a row without a frame in between; None means retry forever.
    """

    initial_delay: float = 0.5
    max_delay: float = 10.0
    multiplier: float = 2.0
    max_attempts: int | None = None
    jitter: float = 0.1

    def __post_init__(self) -> None:
        if not self.initial_delay > 0:
            raise ValueError(f"expected initial_delay > 0 seconds, got {self.initial_delay}")
        if not self.max_delay >= self.initial_delay:
            raise ValueError(f"expected max_delay >= initial_delay ({self.initial_delay} s), got {self.max_delay}")
        if not self.multiplier >= 1.0:
            raise ValueError(f"expected multiplier >= 1, got {self.multiplier}")
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError(f"expected max_attempts >= 1 or None (forever), got {self.max_attempts}")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError(f"expected jitter between 0 and 1, got {self.jitter}")

    def allows(self, attempt: int) -> bool:
        """Whether attempt number `attempt` (1-based) may be made."""
        return self.max_attempts is None or attempt <= self.max_attempts

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before attempt number `attempt` (1-based)."""
        if attempt < 1:
            raise ValueError(f"expected an attempt number >= 1, got {attempt}")
        # Cap the exponent first: multiplier**attempt overflows a float long before "forever" ends.
        base = self.initial_delay
        for _ in range(attempt - 1):
            base *= self.multiplier
            if base >= self.max_delay:
                break
        base = min(base, self.max_delay)
        if self.jitter == 0.0:
            return base
        spread = (rng or random).uniform(-self.jitter, self.jitter)
        return min(self.max_delay, max(0.0, base * (1.0 + spread)))
