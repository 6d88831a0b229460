"""TensorRT's ILogger for builds: warnings and errors go to the SDK's log, and the lines the placement
report and the error messages need (fallbacks, the DLA/GPU layer summary, errors) are kept."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("edge_sdk.tensorrt")

KEPT_WORDS = ("DLA", "DlaLayer", "GpuLayer", "nvm")
"""INFO/VERBOSE lines kept for the placement report; warnings and errors are always kept."""
MAX_KEPT = 20000


def make_logger(trt: Any) -> Any:
    """An ILogger subclass instance whose `lines` holds what it kept, in order."""

    class BuildLogger(trt.ILogger):
        def __init__(self) -> None:
            trt.ILogger.__init__(self)
            self.lines: list[str] = []

        def log(self, severity: Any, msg: str) -> None:
            name = getattr(severity, "name", str(severity))
            serious = name in ("INTERNAL_ERROR", "ERROR", "WARNING")
            if (serious or any(word in msg for word in KEPT_WORDS)) and len(self.lines) < MAX_KEPT:
                self.lines.append(msg)
            level = {"INTERNAL_ERROR": logging.ERROR, "ERROR": logging.ERROR, "WARNING": logging.WARNING}
            log.log(level.get(name, logging.DEBUG), "TensorRT: %s", msg)

        def errors(self, last: int = 5) -> list[str]:
            return [line for line in self.lines if "rror" in line][-last:]

    return BuildLogger()
