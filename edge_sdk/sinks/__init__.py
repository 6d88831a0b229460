"""Result sinks, chosen by `type:` in the pipeline file."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated

from pydantic import BaseModel, Field

from edge_sdk.core.kinds import kinds_of

from .agent import AgentSinkSpec
from .base import Sink, SinkSpecBase
from .callable import CallableSinkSpec
from .fanout import SinkFanout
from .jsonl import JsonlSinkSpec
from .mqtt import MqttSinkSpec
from .preview import PreviewSinkSpec
from .stdout import StdoutSinkSpec
from .video import VideoSinkSpec

AnySinkSpec = (
    JsonlSinkSpec | StdoutSinkSpec | VideoSinkSpec | MqttSinkSpec | CallableSinkSpec | AgentSinkSpec | PreviewSinkSpec
)
"""Every kind of sink, declared once: the pipeline file's union, the names and the lookup come from it."""
SinkSpec = Annotated[AnySinkSpec, Field(discriminator="type")]

SINKS: dict[str, type[BaseModel]] = kinds_of(AnySinkSpec)
"""Sink specs by their `type:` name."""


def create_sink(spec: AnySinkSpec, pipeline_name: str = "pipeline") -> Sink:
    return spec.build(pipeline_name)


def check_sinks(specs: Iterable[SinkSpecBase]) -> None:
    """Fail before a pipeline starts when a sink cannot work here (SinkError), e.g. an agent sink outside an agent."""
    for spec in specs:
        spec.check()


__all__ = ["SINKS", "AnySinkSpec", "Sink", "SinkFanout", "SinkSpec", "SinkSpecBase", "check_sinks", "create_sink"]
