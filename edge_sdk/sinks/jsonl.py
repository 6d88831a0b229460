"""One JSON object per frame, one per line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from edge_sdk.errors import SinkError
from edge_sdk.results import Result

from .base import Sink


class JsonlSinkSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["jsonl"] = Field(description="Append results to a JSON Lines file.")
    path: Path = Field(description="Output file; relative to the pipeline file.")
    append: bool = Field(False, description="Keep earlier lines instead of starting the file anew.")


class JsonlSink(Sink):
    def __init__(self, path: Path, append: bool = False):
        self.path = path
        self.append = append
        self.name = f"jsonl:{path}"
        self._handle: IO[str] | None = None

    def open(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = self.path.open("a" if self.append else "w", encoding="utf-8", buffering=1)
        except OSError as exc:
            raise SinkError(f"cannot open {self.path} for results: {exc.strerror}") from None

    def write(self, result: Result, image: np.ndarray) -> None:
        if self._handle is None:
            raise SinkError(f"{self.name} is not open")
        self._handle.write(json.dumps(result.to_dict()) + "\n")

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
