"""One JSON object per frame, one per line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Literal

import numpy as np
from pydantic import Field
from typing_extensions import Self

from edge_sdk.core.errors import SinkError
from edge_sdk.core.results import Result

from .base import Sink, SinkSpecBase

RESUME_TAIL_BYTES = 4 * 1024 * 1024


class JsonlSinkSpec(SinkSpecBase):
    type: Literal["jsonl"] = Field(description="Append results to a JSON Lines file.")
    path: Path = Field(description="Output file; relative to the pipeline file.")
    append: bool = Field(False, description="Keep earlier lines instead of starting the file anew.")

    def build(self, pipeline_name: str) -> JsonlSink:
        return JsonlSink(self.path, append=self.append)

    def after_restart(self, restart: int) -> Self:
        """A restarted output stage appends to the file (and skips what it already holds)."""
        return self.model_copy(update={"append": True})


class JsonlSink(Sink):
    writes_updates = True

    def __init__(self, path: Path, append: bool = False):
        self.path = path
        self.append = append
        self.name = f"jsonl:{path}"
        self._handle: IO[str] | None = None
        self._held_through: dict[str, int] = {}
        """Per source, the last frame the file held when a restarted output stage reopened it."""

    def open(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = self.path.open("a" if self.append else "w", encoding="utf-8", buffering=1)
        except OSError as exc:
            raise SinkError(f"cannot open {self.path} for results: {exc.strerror}") from None

    def resume(self) -> None:
        """Drop a line cut short by the crash and note, per source, the last frame already written.

        Only the file's tail is read: the frames that can come again are the few that were in the
        rings when the output stage died."""
        if self._handle is None:
            raise SinkError(f"{self.name} is not open")
        self._handle.close()
        with self.path.open("r+b") as file:
            start = max(0, file.seek(0, 2) - RESUME_TAIL_BYTES)
            file.seek(start)
            data = file.read()
            complete = data.rfind(b"\n") + 1
            file.truncate(start + complete)
        lines = data[:complete].splitlines()
        for line in lines[1:] if start else lines:
            try:
                row = json.loads(line)
                self._held_through[row["source"]] = max(self._held_through.get(row["source"], -1), row["frame"])
            except (ValueError, KeyError, TypeError):
                continue  # a line not written by this sink is not ours to judge
        self._handle = self.path.open("a", encoding="utf-8", buffering=1)

    def write(self, result: Result, image: np.ndarray) -> None:
        if self._handle is None:
            raise SinkError(f"{self.name} is not open")
        if result.frame.index <= self._held_through.get(result.frame.source, -1):
            return
        self._handle.write(json.dumps(result.to_dict()) + "\n")

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
