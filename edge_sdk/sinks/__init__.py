"""Result sinks, chosen by `type:` in the pipeline file."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import Field

from .base import Sink
from .callable import CallableSink, CallableSinkSpec
from .fanout import SinkFanout
from .jsonl import JsonlSink, JsonlSinkSpec
from .mqtt import MqttSink, MqttSinkSpec
from .stdout import StdoutSink, StdoutSinkSpec
from .video import VideoSink, VideoSinkSpec

SinkSpec = Annotated[
    JsonlSinkSpec | StdoutSinkSpec | VideoSinkSpec | MqttSinkSpec | CallableSinkSpec, Field(discriminator="type")
]

SinkFactory = Callable[[Any, str], Sink]
"""(spec, pipeline name) -> sink."""

SINKS: dict[str, SinkFactory] = {
    "jsonl": lambda spec, _pipeline: JsonlSink(spec.path, append=spec.append),
    "stdout": lambda spec, _pipeline: StdoutSink(every=spec.every),
    "video": lambda spec, _pipeline: VideoSink(spec.path, fps=spec.fps, codec=spec.codec),
    "mqtt": lambda spec, pipeline: MqttSink.from_spec(spec, pipeline_name=pipeline),
    "callable": lambda spec, _pipeline: CallableSink(spec.function),
}


def create_sink(
    spec: JsonlSinkSpec | StdoutSinkSpec | VideoSinkSpec | MqttSinkSpec | CallableSinkSpec,
    pipeline_name: str = "pipeline",
) -> Sink:
    return SINKS[spec.type](spec, pipeline_name)


__all__ = ["SINKS", "Sink", "SinkFanout", "SinkSpec", "create_sink"]
