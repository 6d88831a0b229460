"""The client's subscriptions: SUBACKs with typed errors, renewal after a reconnect that lost the session,
and dispatch of incoming messages to the handlers whose filters match.

Rule: never call into paho while holding `self._lock` (paho calls back into us holding its own locks).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import paho.mqtt.client as paho
from paho.mqtt.enums import MQTTErrorCode
from paho.mqtt.reasoncodes import ReasonCode

from .acks import AckBook
from .errors import AckTimeoutError, SubscribeRejectedError
from .messages import Message, MessageHandler
from .settings import MqttSettings

log = logging.getLogger("edge_sdk.mqtt.client")


@dataclass
class Subscription:
    qos: int
    handler: MessageHandler


class Subscriptions:
    def __init__(self, settings: MqttSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._table: dict[str, Subscription] = {}
        self._acks: AckBook[list[ReasonCode]] = AckBook()
        self._renewing: set[int] = set()
        self._unsent: set[str] = set()
        """Filters subscribed while disconnected: sent on the next connect even if the session survived."""

    def subscribe(
        self, client: paho.Client, topic_filter: str, handler: MessageHandler, qos: int, timeout: float | None
    ) -> int:
        """See `MqttClient.subscribe`."""
        if qos not in (0, 1, 2):
            raise ValueError(f"expected qos 0, 1 or 2, got {qos}")
        with self._lock:
            self._table[topic_filter] = Subscription(qos=qos, handler=handler)
        rc, mid = client.subscribe(topic_filter, qos=qos)
        if rc == MQTTErrorCode.MQTT_ERR_NO_CONN or mid is None:
            with self._lock:
                self._unsent.add(topic_filter)
            return qos  # sent by renew() on the next connect
        timeout = self.settings.publish_timeout_s if timeout is None else timeout
        reasons = self._acks.claim(mid, timeout)
        address = self.settings.address
        if reasons is None:
            with self._lock:  # the SUBSCRIBE may have died with the connection: send it again on the next connect
                self._unsent.add(topic_filter)
            raise AckTimeoutError(
                f"MQTT broker {address} did not acknowledge the subscription to {topic_filter!r} within {timeout:g} s"
            )
        reason = reasons[0]
        if reason.is_failure:
            with self._lock:
                self._table.pop(topic_filter, None)
            raise SubscribeRejectedError(
                f"MQTT broker {address} refused the subscription to {topic_filter!r}: "
                f"{reason} (reason code 0x{reason.value:02X})",
                reason_code=reason.value,
                reason=str(reason),
            )
        return reason.value

    def forget(self, topic_filter: str) -> bool:
        """Drop a subscription from the table; True when it was known (the caller unsubscribes at the broker)."""
        with self._lock:
            known = self._table.pop(topic_filter, None) is not None
            self._unsent.discard(topic_filter)
        return known

    def renew(self, client: paho.Client, session_present: bool) -> bool:
        """On CONNACK: subscribe again to what the broker does not hold; True while their SUBACKs are awaited.

        (SUBACKs are read on paho's thread, the one calling this, so none can arrive before the set is filled.)
        """
        with self._lock:
            renew = [
                (topic_filter, subscription)
                for topic_filter, subscription in self._table.items()
                if not session_present or topic_filter in self._unsent
            ]
            self._unsent.clear()
        renewing = set()
        for topic_filter, subscription in renew:
            _, mid = client.subscribe(topic_filter, qos=subscription.qos)
            if mid is not None:
                renewing.add(mid)
        with self._lock:
            self._renewing = renewing
        return bool(renewing)

    def connection_lost(self) -> None:
        with self._lock:
            self._renewing = set()

    def on_subscribe(self, mid: int, reasons: list[ReasonCode]) -> bool:
        """A SUBACK arrived; True when it was the last renewal awaited after a connect."""
        with self._lock:
            renewed = mid in self._renewing
            self._renewing.discard(mid)
            all_renewed = renewed and not self._renewing
        if not renewed:
            self._acks.record(mid, reasons)
            return False
        if reasons and reasons[0].is_failure:
            log.warning("MQTT broker %s refused a renewed subscription: %s", self.settings.address, reasons[0])
        return all_renewed

    def dispatch(self, raw: paho.MQTTMessage) -> None:
        """Hand one incoming PUBLISH to every handler whose filter matches (paho's thread)."""
        properties = raw.properties
        message = Message(
            topic=raw.topic,
            payload=bytes(raw.payload),
            qos=raw.qos,
            retain=bool(raw.retain),
            response_topic=getattr(properties, "ResponseTopic", None),
            correlation_data=getattr(properties, "CorrelationData", None),
        )
        with self._lock:
            handlers = [s.handler for f, s in self._table.items() if paho.topic_matches_sub(_unshared(f), raw.topic)]
        for handler in handlers:
            try:
                handler(message)
            except Exception:  # one handler's bug must not stop delivery to the others or paho's thread
                log.exception("MQTT message handler %r failed on a message to %s", handler, message.topic)


def _unshared(topic_filter: str) -> str:
    """The filter a shared subscription (MQTT v5 `$share/<group>/<filter>`) matches topics with."""
    if topic_filter.startswith("$share/"):
        parts = topic_filter.split("/", 2)
        return parts[2] if len(parts) == 3 else topic_filter
    return topic_filter
