"""A human-readable line per frame on standard output."""

from __future__ import annotations

import sys
from typing import Literal

import numpy as np
from pydantic import Field

from edge_sdk.core.results import Result

from .base import Sink, SinkSpecBase


class StdoutSinkSpec(SinkSpecBase):
    type: Literal["stdout"] = Field(description="Print one line per frame.")
    every: int = Field(1, ge=1, le=1_000_000, strict=True, description="Print every N-th frame only; 1..1000000.")

    def build(self, pipeline_name: str) -> StdoutSink:
        return StdoutSink(every=self.every)


class StdoutSink(Sink):
    def __init__(self, every: int = 1):
        self.every = every
        self.name = "stdout"

    def write(self, result: Result, image: np.ndarray) -> None:
        if result.frame.index % self.every:
            return
        found = ", ".join(
            f"{d.label} {d.score:.2f} [{d.x1:.0f},{d.y1:.0f},{d.x2:.0f},{d.y2:.0f}]" for d in result.detections
        ) or ", ".join(f"{c.label} {c.score:.2f}" for c in result.classifications)
        total = result.timings_ms.get("total")
        timing = f" ({total:.1f} ms)" if total is not None else ""
        sys.stdout.write(f"{result.frame.source} #{result.frame.index}{timing}: {found or 'nothing'}\n")
