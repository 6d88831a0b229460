"""`MqttClient`: the SDK's one wrapper over paho-mqtt 2.x (CallbackAPIVersion.VERSION2).

paho's network loop runs in its background thread and reconnects by itself with the settings'
back-off. On top of it: a blocking connect that says *why* it failed (`connection`), publish and
subscribe that wait for the broker's acknowledgement and raise typed errors carrying the reason
code (`publishing`, `subscriptions`), re-subscription after a reconnect that lost the session, and
an observable connection state (`state`). This module puts those pieces together.
"""

from __future__ import annotations

import paho.mqtt.client as paho
from paho.mqtt.reasoncodes import ReasonCode

from .connection import Connection
from .messages import MessageHandler, PublishResult
from .publishing import Payload, Publisher, check_publish, publish_properties, wait_timeout
from .settings import MqttSettings
from .subscriptions import Subscriptions


class MqttClient(Connection):
    """One connection to one broker; thread-safe; usable as a context manager (connect ... disconnect).

    `max_queued` bounds the QoS>0 messages paho holds while they wait for the broker (also while
    reconnecting); beyond it publish() raises QueueFullError instead of growing memory. 0 = unbounded.
    """

    def __init__(self, settings: MqttSettings, max_queued: int = 0):
        super().__init__(settings, max_queued)
        self._publisher = Publisher(settings, max_queued)
        self._subscriptions = Subscriptions(settings)

    def __enter__(self) -> MqttClient:
        self.connect()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.disconnect()

    @property
    def rejected_publishes(self) -> int:
        """Publishes the broker acknowledged with a failure reason code (MQTT v5), waited for or not."""
        return self._publisher.rejected

    def flush(self, timeout: float) -> bool:
        """Wait until every QoS>0 message handed to paho has been acknowledged; False after `timeout` seconds."""
        return self._publisher.flush(timeout)

    def publish(
        self,
        topic: str,
        payload: Payload = None,
        qos: int = 0,
        retain: bool = False,
        wait: bool | float = True,
        response_topic: str | None = None,
        correlation_data: bytes | None = None,
    ) -> PublishResult:
        """Publish one message.

        wait=True waits up to settings.publish_timeout_s for the acknowledgement, a number waits that many
        seconds, False returns once paho has the message. Raises PublishRejectedError with the PUBACK reason
        code (MQTT v5, e.g. 0x87 for a topic the ACL forbids), AckTimeoutError, QueueFullError, or
        NotConnectedError (QoS 0 is not queued while reconnecting; QoS>0 is).
        """
        check_publish(topic, qos)
        client = self._live_client("publish")
        properties = publish_properties(self.settings, response_topic, correlation_data)
        timeout = wait_timeout(self.settings, wait)
        return self._publisher.publish(client, topic, payload, qos, retain, timeout, properties)

    def subscribe(self, topic_filter: str, handler: MessageHandler, qos: int = 1, timeout: float | None = None) -> int:
        """Subscribe and route matching messages to `handler` (called on paho's thread); returns the granted QoS.

        The subscription is renewed after every reconnect that lost the session. While reconnecting it is
        only recorded (returns `qos`). Raises SubscribeRejectedError or AckTimeoutError.
        Note: Mosquitto *grants* subscriptions its ACL forbids and then delivers nothing.
        """
        if qos not in (0, 1, 2):
            raise ValueError(f"expected qos 0, 1 or 2, got {qos}")
        client = self._live_client("subscribe")
        return self._subscriptions.subscribe(client, topic_filter, handler, qos, timeout)

    def unsubscribe(self, topic_filter: str) -> None:
        known = self._subscriptions.forget(topic_filter)
        with self._lock:
            client = self._paho
        if known and client is not None and self.is_connected:
            client.unsubscribe(topic_filter)

    # --- hooks (paho's thread) ---------------------------------------------------------------------

    def _hook_connack(self, client: paho.Client, session_present: bool) -> bool:
        # Subscriptions lost with the session are renewed first; the state turns CONNECTED when the
        # broker has acknowledged them, so "connected" means messages reach the handlers again.
        return self._subscriptions.renew(client, session_present)

    def _hook_connection_lost(self) -> None:
        self._publisher.connection_lost()
        self._subscriptions.connection_lost()

    def _hook_published(self, mid: int, reason: ReasonCode) -> None:
        self._publisher.on_publish(mid, reason)

    def _hook_subscribed(self, mid: int, reasons: list[ReasonCode]) -> None:
        if self._subscriptions.on_subscribe(mid, reasons):
            self._now_connected()

    def _hook_message(self, raw: paho.MQTTMessage) -> None:
        self._subscriptions.dispatch(raw)
