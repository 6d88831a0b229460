"""Send each result to every sink; a failing sink is reported and dropped, the others go on."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from edge_sdk.core.results import Result

from .base import Sink

log = logging.getLogger(__name__)


class SinkFanout:
    def __init__(self, sinks: Sequence[Sink]):
        self.sinks = list(sinks)
        self.failures: dict[str, str] = {}

    def open(self) -> None:
        for sink in list(self.sinks):
            self._guard(sink, "open", sink.open)

    def resume(self) -> None:
        for sink in list(self.sinks):
            self._guard(sink, "resume", sink.resume)

    def write(self, result: Result, image: np.ndarray) -> None:
        for sink in list(self.sinks):
            self._guard(sink, "write", lambda s=sink: s.write(result, image))

    def write_update(self, result: Result) -> None:
        for sink in list(self.sinks):
            self._guard(sink, "write", lambda s=sink: s.write_update(result))

    def close(self) -> None:
        for sink in self.sinks:
            try:
                sink.close()
            except Exception as exc:  # closing must reach every sink
                log.error("sink %s failed to close: %s", sink.name, exc)

    def _guard(self, sink: Sink, action: str, call: object) -> None:
        try:
            call()  # type: ignore[operator]
        except Exception as exc:  # a sink's failure must not stop the others
            self.failures[sink.name] = f"{action}: {exc}"
            log.error("sink %s failed to %s (%s); it is disabled, the other sinks go on", sink.name, action, exc)
            self.sinks.remove(sink)
            try:
                sink.close()
            except Exception:  # already reported; it is gone either way
                log.debug("sink %s also failed to close", sink.name)
