"""`MqttClient`: the SDK's one wrapper over paho-mqtt 2.x (CallbackAPIVersion.VERSION2).

paho's network loop runs in its background thread and reconnects by itself with the settings'
back-off. On top of it: a blocking connect that says *why* it failed (`connection`), publish and
subscribe that wait for the broker's acknowledgement and raise typed errors carrying the reason
code (`publishing`, `subscriptions`), re-subscription after a reconnect that lost the session, an
observable connection state (`state`), and optionally a disk spool for messages published while the
broker is unreachable (`spool`, `outbox`). This module puts those pieces together.
"""

from __future__ import annotations

import time

import paho.mqtt.client as paho
from paho.mqtt.reasoncodes import ReasonCode

from edge_sdk.mqtt.spooling_publisher import SpoolingPublisher

from .connection import Connection
from .errors import NotConnectedError, QueueFullError
from .messages import MessageHandler, PendingPublish, PublishResult
from .publishing import Payload, Publisher, check_publish, payload_bytes, publish_properties, wait_timeout
from .settings import MqttSettings
from .spool import DiskSpool, SpooledMessage, SpoolStats
from .subscriptions import Subscriptions

REPLAY_WINDOW = 100
"""Most spooled messages handed to paho and not yet acknowledged at any time."""


class MqttClient(Connection):
    """One connection to one broker; thread-safe; usable as a context manager (connect ... disconnect).

    `max_queued` bounds the QoS>0 messages paho holds while they wait for the broker (also while
    reconnecting); beyond it publish() raises QueueFullError instead of growing memory. 0 = unbounded.

    With `settings.spool`, messages published while the broker is unreachable, or beyond `max_queued`
    while it is slow, go to that disk spool instead (any QoS), bounded there, and are replayed in order;
    the spool is opened by connect()/start() and closed by disconnect(), and what is not yet delivered
    stays in it for the next start.
    """

    def __init__(self, settings: MqttSettings, max_queued: int = 0):
        super().__init__(settings, max_queued)
        self._publisher = Publisher(settings, max_queued)
        self._subscriptions = Subscriptions(settings)
        self._outbox: SpoolingPublisher | None = None
        self._closed_spool_stats: SpoolStats | None = None

    def __enter__(self) -> MqttClient:
        self.connect()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.disconnect()

    @property
    def rejected_publishes(self) -> int:
        """Publishes the broker acknowledged with a failure reason code (MQTT v5), waited for or not."""
        return self._publisher.rejected

    @property
    def spool_stats(self) -> SpoolStats | None:
        """The disk spool's counters (waiting, evicted, size on disk); None without a spool."""
        outbox = self._outbox
        return outbox.spool.stats() if outbox is not None else self._closed_spool_stats

    def flush(self, timeout: float) -> bool:
        """Wait until every QoS>0 message handed to paho, and the spool, has been acknowledged; False after `timeout` s."""
        deadline = time.monotonic() + timeout
        outbox = self._outbox
        if outbox is not None and not outbox.wait_drained(timeout):
            return False
        return self._publisher.flush(max(0.0, deadline - time.monotonic()))

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

        With a spool, a message published while disconnected, while paho's queue is full (max_queued) or
        while the spool is being replayed is spooled instead and the call returns at once (`spooled=True`,
        whatever `wait` says); SpoolFullError (a QueueFullError) when the spool cannot take it.
        """
        check_publish(topic, qos)
        client = self._live_client("publish")
        properties = publish_properties(self.settings, response_topic, correlation_data)
        timeout = wait_timeout(self.settings, wait)
        outbox = self._outbox
        if outbox is None:
            return self._publisher.publish(client, topic, payload, qos, retain, timeout, properties)
        message = SpooledMessage(topic, payload_bytes(payload), qos, retain, response_topic, correlation_data)
        if outbox.admit(message):
            return _SPOOLED
        try:
            return self._publisher.publish(client, topic, payload, qos, retain, timeout, properties)
        except (NotConnectedError, QueueFullError):  # the broker just went away, or is slower than the publisher
            if outbox.spool_now(message):
                return _SPOOLED
            raise

    def publish_tracked(
        self,
        topic: str,
        payload: Payload = None,
        qos: int = 1,
        response_topic: str | None = None,
        correlation_data: bytes | None = None,
    ) -> PendingPublish:
        """Hand a QoS 1/2 message to paho and return at once; `wait()` on the result waits for its
        acknowledgement. Messages go out in the order of the calls, so several can be on their way at
        once, each acknowledged in turn (a window). Raises as `publish` does when paho refuses the message;
        not for a client with a spool (a spooled message has no acknowledgement to wait for)."""
        check_publish(topic, qos)
        if self._outbox is not None:
            raise ValueError("publish_tracked is not for a client with a spool: use publish")
        client = self._live_client("publish")
        properties = publish_properties(self.settings, response_topic, correlation_data)
        mid = self._publisher.track(client, topic, payload, qos, False, properties)
        return PendingPublish(mid, topic, qos, self._publisher.confirm)

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

    # --- hooks -------------------------------------------------------------------------------------

    def _hook_opening(self) -> None:
        self._publisher.reset()
        spool = self.settings.spool
        if spool is None or self._outbox is not None:
            return
        disk = DiskSpool(spool.path, spool.max_messages, spool.max_bytes, spool.durable)
        window = min(REPLAY_WINDOW, self.max_queued) if self.max_queued else REPLAY_WINDOW
        self._outbox = SpoolingPublisher(disk, self._send_spooled, self._publisher.acks, window)

    def _hook_closed(self) -> None:
        with self._lock:
            outbox, self._outbox = self._outbox, None
        if outbox is not None:
            outbox.close()
            self._closed_spool_stats = outbox.spool.stats()
            outbox.spool.close()

    def _send_spooled(self, message: SpooledMessage) -> int | None:
        with self._lock:
            client = self._paho
        return None if client is None else self._publisher.hand_over(client, message)

    def _hook_connected(self) -> None:
        if self._outbox is not None:
            self._outbox.connection_up()

    def _hook_connack(self, client: paho.Client, session_present: bool) -> bool:
        # Subscriptions lost with the session are renewed first; the state turns CONNECTED when the
        # broker has acknowledged them, so "connected" means messages reach the handlers again.
        return self._subscriptions.renew(client, session_present)

    def _hook_connection_lost(self) -> None:
        if self._outbox is not None:
            self._outbox.connection_down()
        self._publisher.connection_lost()
        self._subscriptions.connection_lost()

    def _hook_published(self, mid: int, reason: ReasonCode) -> None:
        self._publisher.on_publish(mid, reason)

    def _hook_subscribed(self, mid: int, reasons: list[ReasonCode]) -> None:
        if self._subscriptions.on_subscribe(mid, reasons):
            self._now_connected()

    def _hook_message(self, raw: paho.MQTTMessage) -> None:
        self._subscriptions.dispatch(raw)


_SPOOLED = PublishResult(mid=0, queued=True, acknowledged=False, spooled=True)
