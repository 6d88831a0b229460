"""Throughput mode: when the cameras bring frames faster than the edge computes them, the share of
frames the edge cannot keep up with goes to the fastest remote mode, although it takes longer per
frame than the edge would: such a frame would otherwise wait, or be dropped by a live source's ring.

The pace comes from the frames of live sources (cameras, streams): each carries its source's frame
number and capture time, so a camera whose frames are dropped before inference still shows its own
pace (numbers skip). A file read ahead is paced by the edge itself (its frames are written as slots
free up), so it never counts.
"""

from __future__ import annotations

from edge_sdk.core.results import FrameMeta

PACE_WEIGHT = 0.1
"""Weight of the newest interval in a source's running mean."""
MARGIN = 0.1
"""The edge must take over (1 + MARGIN) x the frame interval before frames go away for throughput:
an edge that just keeps up is left alone."""


class CameraPace:
    """How often frames arrive, per source, from their frame numbers and capture times."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[int, float]] = {}
        self._interval_s: dict[str, float] = {}

    def add(self, meta: FrameMeta) -> None:
        last = self._last.get(meta.source)
        self._last[meta.source] = (meta.index, meta.timestamp)
        if last is None or meta.index <= last[0] or meta.timestamp <= last[1]:
            return
        sample = (meta.timestamp - last[1]) / (meta.index - last[0])
        current = self._interval_s.get(meta.source)
        self._interval_s[meta.source] = sample if current is None else current + PACE_WEIGHT * (sample - current)

    def interval_ms(self, workers: int = 1) -> float | None:
        """Mean milliseconds between frames reaching one of `workers` inference workers that share every
        source's frames; None before two frames of a source were seen."""
        if not self._interval_s:
            return None
        frames_per_s = sum(1.0 / interval for interval in self._interval_s.values())
        return 1000.0 * workers / frames_per_s


def throughput_share(edge_ms: float, remote_edge_ms: float, interval_ms: float | None) -> float:
    """The share of frames to send away so that the edge keeps pace with frames arriving every
    `interval_ms`: each frame kept costs `edge_ms` here, each sent away `remote_edge_ms` (its encoding,
    or a split's head), so (1 - f) * edge_ms + f * remote_edge_ms <= interval_ms. 0 while the edge keeps up."""
    if interval_ms is None or interval_ms <= 0 or edge_ms <= (1 + MARGIN) * interval_ms:
        return 0.0
    spare = edge_ms - remote_edge_ms
    if spare <= 0:
        return 0.0
    return min(1.0, (edge_ms - interval_ms) / spare)


class ShareCredit:
    """Picks `share` of the frames, spread evenly: every frame adds its share, and a frame is picked
    when a whole one is owed."""

    def __init__(self) -> None:
        self.credit = 0.0

    def take(self, share: float) -> bool:
        if share <= 0:
            self.credit = 0.0
            return False
        self.credit += share
        if self.credit >= 1.0:
            self.credit -= 1.0
            return True
        return False
