"""Where a frame is inferred: here, or wherever a pipeline extension sends it.

Both runtimes hand their frames to a `FrameDispatch` and take results back from it. The SDK's own is
`LocalDispatch`: `FrameInference` on the spot, every result back at once. A pipeline extension
(`pipeline/extensions.py`; cloud_offload's `offload:` section is one) makes another that may send a
frame away and hand its result back later. Whatever happens to a frame sent away, the dispatch hands
back exactly one final result for it (an extension falls back to `FrameInference` here), and may
later hand back updates of it (`Result.update`), which sinks write marked.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from edge_sdk.core.results import Frame, FrameMeta, Result

from .frame_steps import FrameInference


class FrameDispatch(Protocol):
    def submit(self, frames: Sequence[Frame], queued_ms: Sequence[float]) -> None:
        """Take these frames (their images stay valid until their final result is collected)."""
        ...

    def collect(self, wait_s: float = 0.0) -> list[tuple[FrameMeta, Result]]:
        """The results ready now, waiting up to `wait_s` for one while frames are in flight: each
        submitted frame's final result once, and any updates, each with the meta of the frame as it
        was submitted (what the runtime keys the frame's slot on)."""
        ...

    @property
    def in_flight(self) -> int:
        """Results still owed: frames submitted whose final result has not been collected, and refined
        results (updates) that may still come; each comes, or is given up, by its deadline."""
        ...

    def stats(self) -> dict[str, Any]:
        """Counters for --stats and Prometheus (JSON-ready); empty for the local dispatch."""
        ...

    def close(self) -> None:
        """Release connections; frames still in flight are the caller's to collect first."""
        ...


class LocalDispatch:
    """Every frame inferred here, at once."""

    def __init__(self, infer: FrameInference):
        self.infer = infer
        self._ready: list[tuple[FrameMeta, Result]] = []

    def submit(self, frames: Sequence[Frame], queued_ms: Sequence[float]) -> None:
        results = self.infer(frames, queued_ms)
        self._ready += [(frame.meta, result) for frame, result in zip(frames, results, strict=True)]

    def collect(self, wait_s: float = 0.0) -> list[tuple[FrameMeta, Result]]:
        ready, self._ready = self._ready, []
        return ready

    @property
    def in_flight(self) -> int:
        return len(self._ready)

    def stats(self) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        self._ready = []
