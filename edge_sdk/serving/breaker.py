"""The circuit breaker that sends frames to a lighter fallback model while the primary cannot keep up.

Fed each primary frame's latency (its engine call, plus the wait in the ring of a live source) and
whether the call failed. Three states, as Hystrix and Envoy's outlier detection have them:

- closed: frames go to the primary. It opens when, over the last `window_s`, the p99 latency exceeds
  `p99_ms` or the share of failed frames reaches `error_ratio` (both judged only from `min_requests`
  frames on), or at once after `consecutive_errors` failures in a row (Envoy's consecutive_5xx);
- open: frames go to the fallback for the ejection time: `ejection_s` times the openings in a row
  (Envoy's base_ejection_time x ejections), at most `max_ejection_s`;
- half-open: the next `half_open_probes` frames go to the primary as probes. All within `p99_ms`,
  without error and, for frames that come at a pace (a live camera's), each computed in less time
  than passes between frames: closed (and the openings in a row start again from 0). One that fails
  any of these: open again, for a longer ejection. The pace matters because a probe sees the queue
  the fallback has just drained: a primary slower than the frames come still answers the first
  probes in time, and would close the breaker in the middle of a burst.

Pure policy: no engine, no thread; the clock is injected so tests drive time.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from pydantic import BaseModel, ConfigDict, Field


class BreakerSettings(BaseModel):
    """When the breaker opens, how long it stays open and how it closes (defaults after Hystrix and Envoy)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    p99_ms: float | None = Field(
        None,
        gt=0,
        le=600_000,
        description="Open when the primary's p99 latency over window_s exceeds this many ms (its engine call "
        "plus a live source's wait in the ring); also the most a half-open probe may take. "
        "null = latency never opens it, only errors do.",
    )
    window_s: float = Field(
        10.0, gt=0, le=3600, description="The sliding window p99 and error ratio are judged over (Hystrix: 10 s)."
    )
    min_requests: int = Field(
        20,
        ge=1,
        le=100_000,
        strict=True,
        description="Frames the window must hold before p99 or the error ratio may open it "
        "(Hystrix's requestVolumeThreshold: 20).",
    )
    consecutive_errors: int = Field(
        5,
        ge=1,
        le=100_000,
        strict=True,
        description="Failed primary frames in a row that open it at once (Envoy's consecutive_5xx: 5).",
    )
    error_ratio: float = Field(
        0.5,
        gt=0,
        le=1,
        description="Share of failed frames in the window that opens it, from min_requests frames on "
        "(Hystrix's errorThresholdPercentage: 50%).",
    )
    ejection_s: float = Field(
        5.0,
        gt=0,
        le=3600,
        description="How long it stays open the first time; each opening in a row (a failed probe) adds as much "
        "again (Envoy's base_ejection_time x ejections; Hystrix's sleepWindow: 5 s).",
    )
    max_ejection_s: float = Field(
        60.0,
        gt=0,
        le=86_400,
        description="The longest it stays open, however often it opened in a row (Envoy's max_ejection_time, "
        "300 s there; 60 s here, a camera's frames are worth trying the primary again within a minute).",
    )
    half_open_probes: int = Field(
        3,
        ge=1,
        le=10_000,
        strict=True,
        description="Primary frames tried after the ejection time; all fast and without error close it "
        "(Hystrix tries 1).",
    )


class BreakerState(str, Enum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


STATE_VALUE = {BreakerState.CLOSED: 0, BreakerState.HALF_OPEN: 1, BreakerState.OPEN: 2}
"""The state as a number, for a Prometheus gauge."""


@dataclass(frozen=True)
class Transition:
    before: BreakerState
    after: BreakerState
    reason: str
    """Why, in words: "p99 182 ms over 100 ms, 25 frames in the last 10 s", "5 errors in a row"."""


class CircuitBreaker:
    """The state machine; `use_primary()` before each call, `record()` after each primary frame."""

    def __init__(
        self,
        settings: BreakerSettings,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[Transition], None] | None = None,
    ) -> None:
        self.settings, self.clock, self.on_change = settings, clock, on_change
        self.state = BreakerState.CLOSED
        self.openings = 0
        """Times it opened since it was made."""
        self._window: deque[tuple[float, float, bool]] = deque()
        """(when, latency ms, failed) of the primary's frames while closed."""
        self._errors_in_row = 0
        self._openings_in_row = 0
        self._open_until = 0.0
        self._probes_passed = 0

    def use_primary(self) -> bool:
        """Whether the next frame goes to the primary (open -> half-open once the ejection time is over)."""
        if self.state is BreakerState.OPEN and self.clock() >= self._open_until:
            self._move(BreakerState.HALF_OPEN, f"{self.ejection_s():g} s ejection over")
        return self.state is not BreakerState.OPEN

    def record(
        self, latency_ms: float, failed: bool = False, compute_ms: float | None = None, interval_ms: float | None = None
    ) -> None:
        """One primary frame: how long it took (ms) and whether its call failed; `compute_ms`: its
        share of the engine call, and `interval_ms`: the time between frames when they come at a
        pace (None: they do not, e.g. a file read ahead)."""
        if self.state is BreakerState.HALF_OPEN:
            self._probe(latency_ms, failed, compute_ms, interval_ms)
        elif self.state is BreakerState.CLOSED:
            self._watch(latency_ms, failed)

    def ejection_s(self) -> float:
        """How long the current (or next) opening lasts."""
        return min(self.settings.ejection_s * max(self._openings_in_row, 1), self.settings.max_ejection_s)

    def _watch(self, latency_ms: float, failed: bool) -> None:
        settings, now = self.settings, self.clock()
        self._window.append((now, latency_ms, failed))
        while self._window and self._window[0][0] < now - settings.window_s:
            self._window.popleft()
        self._errors_in_row = self._errors_in_row + 1 if failed else 0
        if self._errors_in_row >= settings.consecutive_errors:
            count = self._errors_in_row
            self._open(f"{count} error{'s' if count > 1 else ''} in a row")
            return
        count = len(self._window)
        if count < settings.min_requests:
            return
        errors = sum(1 for _when, _ms, bad in self._window if bad)
        if errors / count >= settings.error_ratio:
            self._open(f"{errors} of {count} frames failed in the last {settings.window_s:g} s")
            return
        if settings.p99_ms is not None:
            p99 = nearest_rank([ms for _when, ms, bad in self._window if not bad], 99)
            if p99 > settings.p99_ms:
                self._open(
                    f"p99 {p99:.0f} ms over {settings.p99_ms:g} ms, {count} frames in the last {settings.window_s:g} s"
                )

    def _probe(self, latency_ms: float, failed: bool, compute_ms: float | None, interval_ms: float | None) -> None:
        limit = self.settings.p99_ms
        if failed:
            self._open("a probe of the primary failed")
        elif limit is not None and latency_ms > limit:
            self._open(f"a probe of the primary took {latency_ms:.0f} ms, over {limit:g} ms")
        elif compute_ms is not None and interval_ms is not None and compute_ms > interval_ms:
            self._open(
                f"a probe of the primary computed a frame in {compute_ms:.0f} ms, frames come every {interval_ms:.0f} ms"
            )
        else:
            self._probes_passed += 1
            if self._probes_passed >= self.settings.half_open_probes:
                self._openings_in_row = 0
                self._move(BreakerState.CLOSED, f"{self._probes_passed} probes of the primary kept up")

    def _open(self, reason: str) -> None:
        self.openings += 1
        self._openings_in_row += 1
        self._open_until = self.clock() + self.ejection_s()
        self._move(BreakerState.OPEN, reason)

    def _move(self, state: BreakerState, reason: str) -> None:
        before, self.state = self.state, state
        self._window.clear()  # what the primary did before a change says nothing about it after
        self._errors_in_row = self._probes_passed = 0
        if self.on_change is not None:
            self.on_change(Transition(before, state, reason))


def nearest_rank(values: list[float], percentile: float) -> float:
    """The nearest-rank percentile (a value that occurred: below 100 samples, p99 is the slowest); 0 for none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(math.ceil(percentile / 100 * len(ordered)) - 1, 0)]
