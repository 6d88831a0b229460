"""Bandwidth and round-trip time of the edge's link, from its own traffic.

Each sample is a transfer the agent made anyway (a request's bytes and the seconds from publish to its
PUBACK, a response's bytes over its arrival time) or a round trip (a PUBACK, TCP_INFO's RTT). Two
exponentially weighted averages follow each quantity, weighted by time, not by sample count: a fast
one (half-life 0.5 s) that sees a step within a second or two, and a slow one (4 s) that rides out
noise. The estimate trusts the worse of the two: the lower bandwidth and the higher RTT, so a link
that drops is believed at once and one that recovers only once both agree.

A sample more than `outlier_factor` times off the slow average is held back: one spike (a burst
through a buffer, a stalled ACK) moves nothing, while `confirm` such samples in a row in the same
direction are a real change and are taken.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

FAST_HALF_LIFE_S = 0.5
SLOW_HALF_LIFE_S = 4.0
OUTLIER_FACTOR = 4.0
CONFIRM = 3


@dataclass(frozen=True)
class LinkEstimate:
    bandwidth_bps: float | None
    """Bits per second the link delivers; None before the first transfer."""
    rtt_s: float | None
    """Round-trip time; None before the first round trip."""


@dataclass
class _Average:
    """A fast and a slow time-weighted EWMA of one positive quantity, with outlier hold-back."""

    fast: float | None = None
    slow: float | None = None
    last_at: float | None = None
    held: list[float] = field(default_factory=list)

    def add(self, at: float, value: float, outlier_factor: float, confirm: int) -> None:
        if self.slow is not None and not (self.slow / outlier_factor <= value <= self.slow * outlier_factor):
            same_side = all((held > self.slow) == (value > self.slow) for held in self.held)
            self.held = [*self.held, value] if same_side else [value]
            if len(self.held) < confirm:
                return
            value = math.exp(sum(math.log(v) for v in self.held) / len(self.held))  # their geometric mean
            self.fast = self.slow = value  # a confirmed step: start over at the new level
            self.held, self.last_at = [], at
            return
        self.held = []
        if self.fast is None or self.slow is None or self.last_at is None:
            self.fast = self.slow = value
        else:
            elapsed = max(0.0, at - self.last_at)
            self.fast += _weight(elapsed, FAST_HALF_LIFE_S) * (value - self.fast)
            self.slow += _weight(elapsed, SLOW_HALF_LIFE_S) * (value - self.slow)
        self.last_at = at


class LinkEstimator:
    def __init__(self, outlier_factor: float = OUTLIER_FACTOR, confirm: int = CONFIRM):
        self.outlier_factor, self.confirm = outlier_factor, confirm
        self._bandwidth = _Average()
        self._rtt = _Average()

    def add_transfer(self, at: float, nbytes: int, seconds: float) -> None:
        """`nbytes` crossed in `seconds` (ending at `at`, monotonic seconds); tiny or instant ones say
        nothing about bandwidth and are ignored."""
        if nbytes <= 0 or seconds <= 0:
            return
        self._bandwidth.add(at, nbytes * 8 / seconds, self.outlier_factor, self.confirm)

    def add_rtt(self, at: float, rtt_s: float) -> None:
        if rtt_s > 0:
            self._rtt.add(at, rtt_s, self.outlier_factor, self.confirm)

    @property
    def bandwidth_unconfirmed(self) -> bool:
        """A bandwidth step is held back until more samples confirm it (the link may have changed)."""
        return bool(self._bandwidth.held)

    @property
    def rtt_unconfirmed(self) -> bool:
        return bool(self._rtt.held)

    def estimate(self) -> LinkEstimate:
        bandwidth = self._bandwidth
        rtt = self._rtt
        return LinkEstimate(
            min(bandwidth.fast, bandwidth.slow) if bandwidth.fast is not None and bandwidth.slow is not None else None,
            max(rtt.fast, rtt.slow) if rtt.fast is not None and rtt.slow is not None else None,
        )


def _weight(elapsed: float, half_life: float) -> float:
    return 1.0 - 0.5 ** (elapsed / half_life)
