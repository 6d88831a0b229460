"""A human-readable line per frame on standard output, or each Result's JSON form (`edge-sdk run --jsonl`)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from typing import Literal, TextIO

import numpy as np
from pydantic import Field, PrivateAttr
from typing_extensions import Self

from edge_sdk.core.errors import SinkError
from edge_sdk.core.results import Result

from .base import Sink, SinkSpecBase

Stream = Literal["stdout", "stderr"]


class StdoutSinkSpec(SinkSpecBase):
    type: Literal["stdout"] = Field(description="Print one line per frame.")
    every: int = Field(1, ge=1, le=1_000_000, strict=True, description="Print every N-th frame only; 1..1000000.")
    # Set by `edge-sdk run --json/--jsonl`, not in the pipeline file: they travel with the spec
    # (pickled with it) to the output process, which prints from there.
    _stream: Stream = PrivateAttr("stdout")
    _as_json: bool = PrivateAttr(False)

    def build(self, pipeline_name: str) -> StdoutSink:
        return StdoutSink(every=self.every, stream=self._stream, as_json=self._as_json)

    def on_stderr(self) -> Self:
        """These settings printing their lines to stderr, so stdout holds only what a script reads."""
        spec = self.model_copy()
        spec._stream = "stderr"
        return spec

    @classmethod
    def json_lines(cls) -> StdoutSinkSpec:
        """Every frame's Result as one line of JSON (`Result.to_dict`) on stdout."""
        spec = cls(type="stdout")
        spec._as_json = True
        return spec


class StdoutSink(Sink):
    writes_updates = True

    def __init__(self, every: int = 1, stream: Stream = "stdout", as_json: bool = False):
        self.every = every
        self.stream = stream
        self.as_json = as_json
        self.name = "stdout:json" if as_json else "stdout"

    def write(self, result: Result, image: np.ndarray) -> None:
        if result.frame.index % self.every:
            return
        line = json.dumps(result.to_dict()) if self.as_json else describe(result)
        # Looked up per write: a test's capture or a redirect may replace the stream.
        stream: TextIO = sys.stderr if self.stream == "stderr" else sys.stdout
        try:
            stream.write(line + "\n")
            if self.as_json:  # a stream a script reads as it comes, not in buffer-sized chunks
                stream.flush()
        except BrokenPipeError:
            _discard_further_writes(stream)
            raise SinkError(f"{self.stream} was closed by its reader") from None


def describe(result: Result) -> str:
    """`door #12 (41.0 ms): person 0.87 [10,20,110,220]`."""
    found = ", ".join(
        f"{d.label} {d.score:.2f} [{d.x1:.0f},{d.y1:.0f},{d.x2:.0f},{d.y2:.0f}]" for d in result.detections
    ) or ", ".join(f"{c.label} {c.score:.2f}" for c in result.classifications)
    total = result.timings_ms.get("total")
    timing = f" ({total:.1f} ms)" if total is not None else ""
    return f"{result.frame.source} #{result.frame.index}{timing}: {found or 'nothing'}"


def _discard_further_writes(stream: TextIO) -> None:
    """Point a closed pipe's descriptor at /dev/null (Python's advice for SIGPIPE), so the flush at
    exit does not fail a second time with a traceback."""
    with contextlib.suppress(OSError, ValueError, io.UnsupportedOperation):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
