"""Publishing through paho: MQTT v5 request/response properties, waiting for PUBACK/PUBCOMP, typed errors
for a refusal (reason code), a timeout, a full queue or no connection, and counting refusals.
"""

from __future__ import annotations

import logging
import threading

import paho.mqtt.client as paho
from paho.mqtt.enums import MQTTErrorCode
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

from .acks import AckBook
from .errors import AckTimeoutError, NotConnectedError, PublishRejectedError, QueueFullError
from .messages import PublishResult
from .settings import MqttProtocol, MqttSettings
from .spool import SpooledMessage

log = logging.getLogger("edge_sdk.mqtt.client")

Payload = bytes | bytearray | str | None


def check_publish(topic: str, qos: int) -> None:
    """Raise ValueError for a topic with wildcards (or empty) or a QoS outside 0..2."""
    if not topic or "+" in topic or "#" in topic:
        raise ValueError(f"expected a topic name without wildcards, got {topic!r}")
    if qos not in (0, 1, 2):
        raise ValueError(f"expected qos 0, 1 or 2, got {qos}")


def publish_properties(
    settings: MqttSettings, response_topic: str | None, correlation_data: bytes | None
) -> Properties | None:
    """PUBLISH properties for MQTT v5 request/response; None when neither is given."""
    if response_topic is None and correlation_data is None:
        return None
    if settings.protocol is not MqttProtocol.V5:
        raise ValueError("response_topic and correlation_data need protocol v5")
    properties = Properties(PacketTypes.PUBLISH)
    if response_topic is not None:
        properties.ResponseTopic = response_topic
    if correlation_data is not None:
        properties.CorrelationData = correlation_data
    return properties


def payload_bytes(payload: Payload) -> bytes:
    """What paho would send for `payload`: str as UTF-8, None as empty."""
    if payload is None:
        return b""
    if isinstance(payload, str):
        return payload.encode("utf-8")
    return bytes(payload)


def wait_timeout(settings: MqttSettings, wait: bool | float) -> float | None:
    """publish(wait=...) as seconds to wait for the acknowledgement; None for "do not wait"."""
    if wait is True:
        return settings.publish_timeout_s
    if wait is False:
        return None
    if wait <= 0:
        raise ValueError(f"expected wait to be a bool or a positive number of seconds, got {wait}")
    return float(wait)


class Publisher:
    """Hands messages to paho and matches the broker's acknowledgements to them (by message id)."""

    def __init__(self, settings: MqttSettings, max_queued: int) -> None:
        self.settings = settings
        self.max_queued = max_queued
        self.acks: AckBook[ReasonCode] = AckBook()
        self._lock = threading.Lock()
        self._rejected = 0

    @property
    def rejected(self) -> int:
        """Publishes the broker acknowledged with a failure reason code (MQTT v5), waited for or not."""
        with self._lock:
            return self._rejected

    def publish(
        self,
        client: paho.Client,
        topic: str,
        payload: Payload,
        qos: int,
        retain: bool,
        timeout: float | None,
        properties: Properties | None,
    ) -> PublishResult:
        """See `MqttClient.publish`; `timeout` None returns once paho has the message."""
        mid = self._hand(client, topic, payload, qos, retain, properties)
        if timeout is None:
            self.acks.ignore(mid, lost_with_connection=qos == 0)
            return PublishResult(mid=mid, queued=True, acknowledged=False)
        return self.confirm(mid, topic, qos, timeout)

    def track(
        self, client: paho.Client, topic: str, payload: Payload, qos: int, retain: bool, properties: Properties | None
    ) -> int:
        """Hand a QoS 1/2 message to paho and return its mid; its acknowledgement waits for `confirm`."""
        if qos == 0:
            raise ValueError("a tracked publish is acknowledged: expected qos 1 or 2, got 0")
        return self._hand(client, topic, payload, qos, retain, properties)

    def confirm(self, mid: int, topic: str, qos: int, timeout: float) -> PublishResult:
        """Wait up to `timeout` s for the acknowledgement of `mid`; raises as `MqttClient.publish` does."""
        address = self.settings.address
        reason = self.acks.claim(mid, timeout, lost_with_connection=qos == 0)
        if reason is None:
            raise AckTimeoutError(
                f"MQTT broker {address} did not acknowledge the publish to {topic!r} "
                f"within {timeout:g} s (QoS {qos}; it stays queued)"
            )
        if reason.is_failure:
            raise PublishRejectedError(
                f"MQTT broker {address} rejected the publish to {topic!r}: {reason} (reason code 0x{reason.value:02X})",
                reason_code=reason.value,
                reason=str(reason),
            )
        return PublishResult(mid=mid, queued=True, acknowledged=True, reason_code=reason.value, reason=str(reason))

    def _hand(
        self, client: paho.Client, topic: str, payload: Payload, qos: int, retain: bool, properties: Properties | None
    ) -> int:
        """Give the message to paho; its mid. Raises QueueFullError or NotConnectedError when paho refuses it."""
        address = self.settings.address
        info = client.publish(topic, payload, qos=qos, retain=retain, properties=properties)
        if info.rc == MQTTErrorCode.MQTT_ERR_QUEUE_SIZE:
            raise QueueFullError(
                f"MQTT outgoing queue to {address} is full ({self.max_queued} messages); "
                f"message to {topic!r} not accepted"
            )
        queued = info.rc == MQTTErrorCode.MQTT_ERR_SUCCESS or (info.rc == MQTTErrorCode.MQTT_ERR_NO_CONN and qos > 0)
        if not queued:
            raise NotConnectedError(
                f"not connected to MQTT broker {address} ({paho.error_string(info.rc)}); "
                f"QoS {qos} message to {topic!r} dropped"
            )
        return info.mid

    def hand_over(self, client: paho.Client, message: SpooledMessage) -> int | None:
        """Give a spooled message to paho at QoS >= 1 (so it is acknowledged); its mid, or None if paho's queue is full.

        The acknowledgement is left in `acks` for the caller to collect.
        """
        v5 = self.settings.protocol is MqttProtocol.V5
        properties = publish_properties(self.settings, message.response_topic, message.correlation_data) if v5 else None
        qos = max(message.qos, 1)
        info = client.publish(message.topic, message.payload, qos=qos, retain=message.retain, properties=properties)
        if info.rc == MQTTErrorCode.MQTT_ERR_QUEUE_SIZE:
            return None
        return info.mid

    def reset(self) -> None:
        """A new paho client is about to take over (its message ids start again)."""
        self.acks.reset()

    def on_publish(self, mid: int, reason: ReasonCode) -> None:
        """PUBACK/PUBCOMP arrived, or a QoS 0 packet was written (paho's thread)."""
        if reason.is_failure:
            with self._lock:
                self._rejected += 1
            log.debug("MQTT broker %s rejected publish mid %d: %s", self.settings.address, mid, reason)
        self.acks.record(mid, reason)

    def connection_lost(self) -> None:
        self.acks.connection_lost()

    def flush(self, timeout: float) -> bool:
        """Wait until every QoS>0 message handed to paho has been acknowledged; False after `timeout` seconds."""
        return self.acks.wait_until_settled(timeout)
