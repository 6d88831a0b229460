"""Throughput mode: when the cameras bring frames faster than the edge computes them, the share of
frames the edge cannot keep up with goes to the remote mode that costs the edge least, although it
takes longer per frame than the edge would: such a frame would otherwise wait, or be dropped by a
live source's ring.

The pace comes from the frames of live sources (cameras, streams): each carries its source's frame
number and capture time, so a camera whose frames are dropped before inference still shows its own
pace (numbers skip). A file read ahead is paced by the edge itself (its frames are written as slots
free up), so it never counts.
"""

from __future__ import annotations

from collections.abc import Mapping, Set

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


class ThroughputMode:
    """The agent's throughput mode: the pace of its live sources, the share of frames it sends away,
    and what a person should hear of it."""

    def __init__(self, workers: int, live_sources: Set[str]) -> None:
        self.workers, self.live_sources = workers, live_sources
        self.pace = CameraPace()
        self._credit = ShareCredit()
        self.share = 0.0
        """The share as last reported (a status event each time it starts, stops or moves by 10 points)."""
        self.mode: str | None = None
        """The remote mode the share goes to, as last reported."""
        self.news: str | None = None
        """What the last pick changed, for a status event; None when nothing worth saying did."""

    def add(self, meta: FrameMeta) -> None:
        if meta.source in self.live_sources:
            self.pace.add(meta)

    def pick(
        self,
        edge_ms: float,
        remote_edge_ms: Mapping[str, float],
        expected_ms: Mapping[str, float],
        carried: Mapping[str, float] | None = None,
    ) -> str | None:
        """The remote mode this frame goes to for throughput, or None to keep it on the edge. Of the
        available remote modes (`expected_ms`), the one that costs the edge least (`remote_edge_ms`: its
        own work, sending and the answer's handling), then the fastest: the edge is the bottleneck, so a
        split whose head runs here frees little of it. `carried`: the share of the frames each mode's
        uplink carries (the share is capped at it)."""
        best = min(expected_ms, key=lambda name: (remote_edge_ms[name], expected_ms[name])) if expected_ms else None
        interval_ms = self.pace.interval_ms(self.workers)
        share = 0.0 if best is None else throughput_share(edge_ms, remote_edge_ms[best], interval_ms)
        if best is not None and carried is not None:
            share = min(share, carried.get(best, 0.0))
        self.news = self._news(share, best, edge_ms, interval_ms)
        return best if best is not None and self._credit.take(share) else None

    def _news(self, share: float, mode: str | None, edge_ms: float, interval_ms: float | None) -> str | None:
        before = self.share
        if (before == 0) == (share == 0) and abs(share - before) < 0.1:
            return None
        self.share, self.mode = share, mode
        if share:
            return (
                f"throughput: {share:.0%} of frames to {mode}: the edge takes {edge_ms:.0f} ms a frame, "
                f"frames come every {interval_ms:.0f} ms"
            )
        if mode is None or interval_ms is None:
            return "throughput: every frame on the edge again: no remote mode is available"
        return (
            f"throughput: every frame on the edge again: it takes {edge_ms:.0f} ms a frame, "
            f"frames come every {interval_ms:.0f} ms"
        )
