"""A session per input shape, so that no ONNX Runtime session ever runs two shapes.

On the CUDA provider a session that meets an input shape other than its last one pays for it every time,
even for a shape it ran before: 28 ms for a ResNet-18-sized CNN and 2 s for the demo detector on an H100
(ONNX Runtime 1.31, cuDNN 9; tools/gpu/serve_stalls.py). A batcher that moves between batch sizes would
pay that on most calls. Sessions are opened on a shape's first call and the least recently used one is
closed past the limit.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

log = logging.getLogger(__name__)

ShapeKey = tuple[tuple[str, tuple[int, ...]], ...]
Opened = tuple[Any, Any]
"""(an ONNX Runtime session, its I/O binding or None)."""


class ShapeSessions:
    """Up to `limit` sessions, each kept for one input shape; not thread-safe (a runner has one caller)."""

    def __init__(self, limit: int):
        self.limit = limit
        self._sessions: OrderedDict[ShapeKey, Opened] = OrderedDict()
        self.opened = 0
        """Sessions opened after the first (each a load of the engine)."""

    def __len__(self) -> int:
        return len(self._sessions)

    def session_for(self, feed: Mapping[str, Any], current: Opened, open_one: Callable[[], Opened]) -> Opened:
        """The session for `feed`'s shapes: `current` if it is the first shape met, else a session kept for
        this shape or a new one from `open_one`."""
        key = tuple(sorted((name, tuple(getattr(value, "shape", ()))) for name, value in feed.items()))
        found = self._sessions.get(key)
        if found is not None:
            self._sessions.move_to_end(key)
            return found
        if not self._sessions:
            self._sessions[key] = current
            return current
        if len(self._sessions) >= self.limit:
            closed, _ = self._sessions.popitem(last=False)
            log.info("shape sessions: closed the session for %s (%d kept at most)", _describe(closed), self.limit)
        opened = self._sessions[key] = open_one()
        self.opened += 1
        log.info("shape sessions: opened a session for %s", _describe(key))
        return opened


def _describe(key: ShapeKey) -> str:
    return ", ".join(f"{name} {'x'.join(map(str, shape))}" for name, shape in key)
