"""Each result as JSON to an MQTT topic, without ever blocking the pipeline.

publish() only hands the message to paho's queue; paho's thread sends it. While the broker is away,
QoS 1/2 messages wait in that queue up to `max_queued` and are sent after the automatic reconnect;
beyond the bound (and for QoS 0, which paho does not queue) results are dropped, counted and logged.
A disk spool for long outages is not part of this sink yet.

The pipeline name fills `{pipeline}` in the topic: the runtime passes it to `MqttSinkSpec.build`
(`from_spec` defaults it to "pipeline").
Paths inside `broker` (TLS files, password_file) are used as written: relative ones start from the
working directory, not from the pipeline file.
"""

from __future__ import annotations

import json
import logging
import string
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator

from edge_sdk.core.errors import ConfigError, SinkError
from edge_sdk.core.results import Result
from edge_sdk.mqtt.errors import BrokerUnreachableError, MqttError, NotConnectedError, QueueFullError
from edge_sdk.mqtt.settings import MqttSettings
from edge_sdk.mqtt.state import ConnectionState

from .base import Sink, SinkSpecBase

log = logging.getLogger(__name__)

TOPIC_FIELDS = ("pipeline", "source", "frame")
DEFAULT_TOPIC = "edge/{pipeline}/{source}/results"
DEFAULT_PIPELINE_NAME = "pipeline"
MAX_QUEUED = 100_000
"""Results an MQTT sink may hold in memory (about 1 KB each as JSON: 100 MB at most)."""


class TopicTemplate:
    """A topic with {pipeline}, {source} and {frame} placeholders (format specs allowed, e.g. {frame:06d}).

    Values are made topic-safe when filled in: '/', '+', '#' in a name become '_', so a source
    name cannot add topic levels or wildcards.
    """

    def __init__(self, template: str):
        self.template = template
        try:
            parts = list(string.Formatter().parse(template))
        except ValueError as exc:
            raise ConfigError(f"topic template {template!r}: {exc}") from None
        for literal, field_name, _, _ in parts:
            if "+" in literal or "#" in literal:
                raise ConfigError(f"topic template {template!r}: expected no MQTT wildcards ('+', '#') in a topic")
            if field_name is not None and field_name not in TOPIC_FIELDS:
                allowed = ", ".join("{" + name + "}" for name in TOPIC_FIELDS)
                raise ConfigError(
                    f"topic template {template!r}: expected placeholders among {allowed}, got {{{field_name}}}"
                )
        try:
            sample = self.render(pipeline="p", source="s", frame=0)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"topic template {template!r}: {exc}") from None
        if not sample:
            raise ConfigError(f"topic template {template!r}: expected a non-empty topic")

    def render(self, pipeline: str, source: str, frame: int) -> str:
        return self.template.format(pipeline=_topic_safe(pipeline), source=_topic_safe(source), frame=frame)


def _topic_safe(value: str) -> str:
    return value.replace("/", "_").replace("+", "_").replace("#", "_").replace("\0", "_")


class MqttSinkSpec(SinkSpecBase):
    type: Literal["mqtt"] = Field(description="Publish each result as JSON to an MQTT broker.")
    broker: MqttSettings = Field(
        default_factory=MqttSettings,
        description="Broker address, TLS, credentials (password_env / password_file, never inline), reconnect policy.",
    )
    topic: str = Field(
        DEFAULT_TOPIC,
        description="Topic template; placeholders {pipeline}, {source}, {frame} (e.g. edge/{pipeline}/{source}).",
    )
    qos: int = Field(
        1, ge=0, le=2, strict=True, description="MQTT QoS 0..2; 1 and 2 are queued while the broker is away, 0 is not."
    )
    retain: bool = Field(False, description="Ask the broker to retain the last result per topic.")
    include_empty: bool = Field(False, description="Also publish frames with no detections and no classifications.")
    max_queued: int = Field(
        1000,
        ge=1,
        le=MAX_QUEUED,
        strict=True,
        description="Results held in memory while the broker is slow or away, 1..100000; beyond this they are "
        "dropped and counted.",
    )

    @field_validator("topic")
    @classmethod
    def _valid_template(cls, value: str) -> str:
        try:
            TopicTemplate(value)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return value

    def build(self, pipeline_name: str) -> MqttSink:
        return MqttSink.from_spec(self, pipeline_name=pipeline_name)


@dataclass(frozen=True)
class MqttSinkStats:
    published: int
    """Results handed to the client (sent, or queued for sending)."""
    skipped_empty: int
    """Results without detections or classifications, not published (include_empty: false)."""
    overflow: int
    """Results dropped because max_queued messages were already waiting."""
    dropped_offline: int
    """QoS 0 results dropped because the broker was away (QoS 0 is never queued)."""
    rejected: int
    """Publishes the broker refused (MQTT v5 PUBACK failure reason, e.g. 0x87 not authorised)."""

    @property
    def dropped(self) -> int:
        return self.overflow + self.dropped_offline

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "dropped": self.dropped}


class MqttSink(Sink):
    writes_updates = True

    def __init__(
        self,
        settings: MqttSettings,
        topic: str = DEFAULT_TOPIC,
        qos: int = 1,
        retain: bool = False,
        include_empty: bool = False,
        max_queued: int = 1000,
        pipeline_name: str = DEFAULT_PIPELINE_NAME,
        close_timeout_s: float = 2.0,
    ):
        if qos not in (0, 1, 2):
            raise ConfigError(f"mqtt sink: expected qos 0, 1 or 2, got {qos}")
        self.template = TopicTemplate(topic)
        self.settings = settings
        self.qos = qos
        self.retain = retain
        self.include_empty = include_empty
        self.max_queued = max_queued
        self.pipeline_name = pipeline_name
        self.close_timeout_s = close_timeout_s
        self.name = f"mqtt:{settings.address}/{topic}"
        from edge_sdk.mqtt.client import MqttClient  # paho loads only for a pipeline that has an MQTT sink

        self.client = MqttClient(settings, max_queued=max_queued)
        self._published = 0
        self._skipped_empty = 0
        self._overflow = 0
        self._dropped_offline = 0
        self._dropping = False

    @classmethod
    def from_spec(cls, spec: MqttSinkSpec, pipeline_name: str = DEFAULT_PIPELINE_NAME) -> MqttSink:
        return cls(
            spec.broker,
            topic=spec.topic,
            qos=spec.qos,
            retain=spec.retain,
            include_empty=spec.include_empty,
            max_queued=spec.max_queued,
            pipeline_name=pipeline_name,
        )

    @property
    def stats(self) -> MqttSinkStats:
        return MqttSinkStats(
            published=self._published,
            skipped_empty=self._skipped_empty,
            overflow=self._overflow,
            dropped_offline=self._dropped_offline,
            rejected=self.client.rejected_publishes,
        )

    def open(self) -> None:
        """Connect; a broker that is merely unreachable does not stop the pipeline (the sink keeps trying).

        Refused credentials or a failed TLS handshake raise SinkError: retrying would not help.
        """
        try:
            self.client.connect()
        except BrokerUnreachableError as exc:
            log.warning(
                "%s: %s; results queue (up to %d, QoS>0) while the sink keeps trying in the background",
                self.name,
                exc,
                self.max_queued,
            )
            self.client.start()
        except MqttError as exc:
            raise SinkError(f"{self.name}: {exc}") from exc

    def write(self, result: Result, image: np.ndarray) -> None:
        if not self.include_empty and not result.detections and not result.classifications:
            self._skipped_empty += 1
            return
        if self.client.state in (ConnectionState.IDLE, ConnectionState.CLOSED):
            raise SinkError(f"{self.name} is not open")
        topic = self.template.render(pipeline=self.pipeline_name, source=result.frame.source, frame=result.frame.index)
        payload = json.dumps(result.to_dict())
        try:
            self.client.publish(topic, payload, qos=self.qos, retain=self.retain, wait=False)
        except QueueFullError:
            self._overflow += 1
            self._report_drop("its queue is full")
            return
        except NotConnectedError:
            self._dropped_offline += 1
            self._report_drop("QoS 0 is not queued while the broker is away")
            return
        self._published += 1
        self._dropping = False

    def close(self) -> None:
        self.client.disconnect(flush_timeout=self.close_timeout_s)
        stats = self.stats
        if stats.dropped or stats.rejected:
            log.warning("%s closed: %s", self.name, stats.to_dict())

    def _report_drop(self, why: str) -> None:
        """One warning per run of drops (the counters keep the totals)."""
        if not self._dropping:
            self._dropping = True
            log.warning(
                "%s: dropping results, %s (broker %s); %d dropped so far",
                self.name,
                why,
                self.client.state.value,
                self._overflow + self._dropped_offline,
            )
