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

SINKS: dict[str, Callable[[Any], Sink]] = {
    "jsonl": lambda spec: JsonlSink(spec.path, append=spec.append),
    "stdout": lambda spec: StdoutSink(every=spec.every),
    "video": lambda spec: VideoSink(spec.path, fps=spec.fps, codec=spec.codec),
    # The runtime will pass the pipeline name; until then {pipeline} in the topic is "pipeline".
    "mqtt": lambda spec: MqttSink.from_spec(spec),
    "callable": lambda spec: CallableSink(spec.function),
}


def create_sink(spec: JsonlSinkSpec | StdoutSinkSpec | VideoSinkSpec | MqttSinkSpec | CallableSinkSpec) -> Sink:
    return SINKS[spec.type](spec)


__all__ = ["SINKS", "Sink", "SinkFanout", "SinkSpec", "create_sink"]
