"""The sink role: results (and their frames) out."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict
from typing_extensions import Self

from edge_sdk.core.results import Result

NO_IMAGE = np.zeros((0, 0, 3), np.uint8)
"""The image an update is written with: it has no pixels."""


class Sink(ABC):
    name: str
    writes_updates: ClassVar[bool] = False
    """Writes results rather than frames, so it writes updates too (write_update)."""

    def open(self) -> None:  # noqa: B027 - most sinks need no set-up
        """Acquire files or connections; called once before the first write."""

    def resume(self) -> None:  # noqa: B027 - only sinks that can see what they hold need it
        """Called after open() by an output stage restarted after a crash: results this sink
        already holds may come again (their frames were redone); skip those."""

    @abstractmethod
    def write(self, result: Result, image: np.ndarray) -> None:
        """Called once per frame with its result and its BGR pixels."""

    def write_update(self, result: Result) -> None:
        """A refined result (`result.update`) of a frame this sink was given before, without its pixels
        (they are not kept for it): a sink that `writes_updates` gets it as write(result, NO_IMAGE);
        one that draws frames (video, preview) has drawn that frame already and ignores it."""
        if self.writes_updates:
            self.write(result, NO_IMAGE)

    def close(self) -> None:  # noqa: B027
        """Flush and release; called once, also after a failure."""


class SinkSpecBase(BaseModel):
    """A sink's settings in the pipeline file (`type:` picks the kind) and what the runtime asks of them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @abstractmethod
    def build(self, pipeline_name: str) -> Sink:
        """The sink these settings describe, for the pipeline named `pipeline_name`."""

    def after_restart(self, restart: int) -> Self:
        """The settings for the `restart`-th output process after a crash; the same by default."""
        return self

    def check(self) -> None:
        """Raise SinkError, before a pipeline starts, when the sink cannot work on this host."""
