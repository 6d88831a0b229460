"""Which mode the next frame takes, from each available mode's expected latency, with hysteresis.

A switch needs a margin, so an estimate that wobbles does not flap between two modes of about the
same worth:
- to another mode only when it is expected below `enter` (0.8) of the current mode's latency;
- back from a remote mode to the edge once the remote mode is expected above `leave` (0.95) of the
  edge's latency: a remote mode has to stay clearly worth its risk (the link can go);
- no switch within `dwell_s` of the last one.

A mode that becomes unavailable (no worker, the link lost, deadlines missed, the deadline shorter
than the mode is expected to take) is left at once, whatever the dwell: the edge is always there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .config import HysteresisSettings

EDGE = "edge"


@dataclass(frozen=True)
class Switch:
    mode: str
    previous: str
    reason: str


class Decision:
    def __init__(self, hysteresis: HysteresisSettings, start_at: float = 0.0):
        self.hysteresis = hysteresis
        self.mode = EDGE
        self._switched_at = start_at - hysteresis.dwell_s

    def choose(self, expected_ms: Mapping[str, float], now: float) -> Switch | None:
        """Update `mode` for `expected_ms` (the available modes' expected latencies; edge always in it);
        the switch made, if any."""
        if EDGE not in expected_ms:
            raise ValueError("the edge mode is always available")
        current = self.mode
        best = min(expected_ms, key=lambda name: expected_ms[name])
        if current not in expected_ms:
            return self._switch(
                best, f"{current} is unavailable; {best} is expected to take {expected_ms[best]:.0f} ms", now
            )
        if now - self._switched_at < self.hysteresis.dwell_s:
            return None
        here = expected_ms[current]
        if best != current and expected_ms[best] < self.hysteresis.enter * here:
            return self._switch(
                best,
                f"{best} is expected to take {expected_ms[best]:.0f} ms, under {self.hysteresis.enter:g}x "
                f"{current}'s {here:.0f} ms",
                now,
            )
        edge = expected_ms[EDGE]
        if current != EDGE and here > self.hysteresis.leave * edge:
            return self._switch(
                EDGE,
                f"{current} is expected to take {here:.0f} ms, over {self.hysteresis.leave:g}x the edge's {edge:.0f} ms",
                now,
            )
        return None

    def _switch(self, mode: str, reason: str, now: float) -> Switch:
        switch = Switch(mode, self.mode, reason)
        self.mode, self._switched_at = mode, now
        return switch
