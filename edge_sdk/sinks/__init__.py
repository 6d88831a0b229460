"""Result sinks, chosen by `type:` in the pipeline file."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Annotated, Any

from pydantic import Field

from .agent import AgentSink, AgentSinkSpec, outbox_from_environment
from .base import Sink
from .callable import CallableSink, CallableSinkSpec
from .fanout import SinkFanout
from .jsonl import JsonlSink, JsonlSinkSpec
from .mqtt import MqttSink, MqttSinkSpec
from .stdout import StdoutSink, StdoutSinkSpec
from .video import VideoSink, VideoSinkSpec

SinkSpec = Annotated[
    JsonlSinkSpec | StdoutSinkSpec | VideoSinkSpec | MqttSinkSpec | CallableSinkSpec | AgentSinkSpec,
    Field(discriminator="type"),
]

SinkFactory = Callable[[Any, str], Sink]
"""(spec, pipeline name) -> sink."""

SINKS: dict[str, SinkFactory] = {
    "jsonl": lambda spec, _pipeline: JsonlSink(spec.path, append=spec.append),
    "stdout": lambda spec, _pipeline: StdoutSink(every=spec.every),
    "video": lambda spec, _pipeline: VideoSink(spec.path, fps=spec.fps, codec=spec.codec),
    "mqtt": lambda spec, pipeline: MqttSink.from_spec(spec, pipeline_name=pipeline),
    "callable": lambda spec, _pipeline: CallableSink(spec.function),
    "agent": lambda spec, pipeline: AgentSink.from_spec(spec, pipeline_name=pipeline),
}


def create_sink(
    spec: JsonlSinkSpec | StdoutSinkSpec | VideoSinkSpec | MqttSinkSpec | CallableSinkSpec | AgentSinkSpec,
    pipeline_name: str = "pipeline",
) -> Sink:
    return SINKS[spec.type](spec, pipeline_name)


def check_sinks(specs: Iterable[Any]) -> None:
    """Fail before a pipeline starts when a sink cannot work here (SinkError), e.g. an agent sink outside an agent."""
    if any(spec.type == "agent" for spec in specs):
        outbox_from_environment()


__all__ = ["SINKS", "Sink", "SinkFanout", "SinkSpec", "check_sinks", "create_sink"]
