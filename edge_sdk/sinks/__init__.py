"""Result sinks, chosen by `type:` in the pipeline file."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import Field

from .base import Sink
from .fanout import SinkFanout
from .jsonl import JsonlSink, JsonlSinkSpec
from .stdout import StdoutSink, StdoutSinkSpec
from .video import VideoSink, VideoSinkSpec

SinkSpec = Annotated[JsonlSinkSpec | StdoutSinkSpec | VideoSinkSpec, Field(discriminator="type")]

SINKS: dict[str, Callable[[Any], Sink]] = {
    "jsonl": lambda spec: JsonlSink(spec.path, append=spec.append),
    "stdout": lambda spec: StdoutSink(every=spec.every),
    "video": lambda spec: VideoSink(spec.path, fps=spec.fps, codec=spec.codec),
}


def create_sink(spec: JsonlSinkSpec | StdoutSinkSpec | VideoSinkSpec) -> Sink:
    return SINKS[spec.type](spec)


__all__ = ["SINKS", "Sink", "SinkFanout", "SinkSpec", "create_sink"]
