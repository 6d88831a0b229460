"""`MqttClient`: the SDK's one wrapper over paho-mqtt 2.x (CallbackAPIVersion.VERSION2).

paho's network loop runs in its background thread (`loop_start`) and reconnects by itself with
the settings' back-off. This class adds what paho leaves to the caller: a blocking connect that
says *why* it failed (typed `MqttError`s with the MQTT reason code), publish/subscribe that wait
for the broker's acknowledgement and raise on a failure reason code, re-subscription after a
reconnect that lost the session, and an observable connection state.

Rule for this module: never call into paho while holding `self._lock` (paho calls back into us
while holding its own locks).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

from .acks import AckBook
from .credentials import read_password
from .errors import (
    AckTimeoutError,
    BrokerUnreachableError,
    MqttError,
    NotConnectedError,
    PublishRejectedError,
    QueueFullError,
    SubscribeRejectedError,
)
from .failures import error_from_connect_exception, error_from_early_close, refusal_from_connack
from .messages import Message, MessageHandler, PublishResult
from .settings import MqttProtocol, MqttSettings
from .state import ConnectionEvent, ConnectionListener, ConnectionState
from .tls import ssl_context_from

log = logging.getLogger(__name__)
_paho_log = log.getChild("paho")

Payload = bytes | bytearray | str | None


@dataclass
class _Subscription:
    qos: int
    handler: MessageHandler


@dataclass
class _Attempt:
    """The outcome of one blocking connect(), filled in from paho's thread."""

    done: threading.Event = field(default_factory=threading.Event)
    error: MqttError | None = None

    def finish(self, error: MqttError | None = None) -> None:
        if not self.done.is_set():
            self.error = error
            self.done.set()


class MqttClient:
    """One connection to one broker; thread-safe; usable as a context manager (connect ... disconnect).

    `max_queued` bounds the QoS>0 messages paho holds while they wait for the broker (also while
    reconnecting); beyond it publish() raises QueueFullError instead of growing memory. 0 = unbounded.
    """

    def __init__(self, settings: MqttSettings, max_queued: int = 0):
        if max_queued < 0:
            raise ValueError(f"expected max_queued >= 0, got {max_queued}")
        self.settings = settings
        self.max_queued = max_queued
        self._lock = threading.RLock()
        self._state_changed = threading.Condition(self._lock)
        self._state = ConnectionState.IDLE
        self._listeners: list[ConnectionListener] = []
        self._subscriptions: dict[str, _Subscription] = {}
        self._publish_acks: AckBook[ReasonCode] = AckBook()
        self._subscribe_acks: AckBook[list[ReasonCode]] = AckBook()
        self._attempt: _Attempt | None = None
        self._renewing: set[int] = set()
        self._unsent: set[str] = set()
        """Filters subscribed while disconnected: sent on the next connect even if the session survived."""
        self._connack_reason: ReasonCode | None = None
        self._last_error = ""
        self._paho: paho.Client | None = None
        self.connects = 0
        """Successful CONNACKs so far (the first connect and every reconnect)."""
        self.rejected_publishes = 0
        """Publishes the broker acknowledged with a failure reason code (MQTT v5), waited for or not."""

    # --- state -------------------------------------------------------------------------------------

    @property
    def state(self) -> ConnectionState:
        with self._lock:
            return self._state

    @property
    def is_connected(self) -> bool:
        return self.state is ConnectionState.CONNECTED

    def add_listener(self, listener: ConnectionListener) -> Callable[[], None]:
        """Call `listener` on every state change (from paho's thread); returns a function that removes it."""
        with self._lock:
            self._listeners.append(listener)

        def remove() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return remove

    def wait_for_state(self, state: ConnectionState, timeout: float) -> bool:
        """Block until the connection is in `state`; False after `timeout` seconds."""
        with self._state_changed:
            return self._state_changed.wait_for(lambda: self._state is state, timeout)

    def _set_state(self, state: ConnectionState, reason_code: int | None = None, reason: str = "") -> None:
        with self._lock:
            previous = self._state
            if previous is state:
                return
            self._state = state
            self._state_changed.notify_all()
            listeners = list(self._listeners)
        event = ConnectionEvent(state=state, previous=previous, reason_code=reason_code, reason=reason)
        for listener in listeners:
            try:
                listener(event)
            except Exception:  # a listener's bug must not kill paho's network thread
                log.exception("MQTT connection listener %r failed on %s", listener, event)

    # --- connect / disconnect ----------------------------------------------------------------------

    def connect(self, timeout: float | None = None) -> None:
        """Connect and wait for the broker's CONNACK; afterwards paho keeps the connection (reconnecting as needed).

        Raises ConfigError for unreadable secrets or certificate files, BrokerUnreachableError,
        TlsHandshakeError or ConnectRefusedError (with the reason code); after a failure nothing keeps running.
        """
        timeout = self.settings.connect_timeout_s if timeout is None else timeout
        client = self._client_for_attempt()
        attempt = _Attempt()
        with self._lock:
            self._attempt = attempt
            self._last_error = ""
        self._set_state(ConnectionState.CONNECTING)
        deadline = time.monotonic() + timeout
        try:
            rc = client.connect(
                self.settings.host, self.settings.effective_port, self.settings.keepalive_s, **self._connect_args()
            )
        except Exception as exc:
            self._abandon(client)
            raise error_from_connect_exception(self.settings, exc) from None
        if rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
            self._abandon(client)
            raise self._lost_before_connack()
        client.loop_start()
        if not attempt.done.wait(max(0.0, deadline - time.monotonic())):
            attempt.finish(
                BrokerUnreachableError(
                    f"MQTT broker {self.settings.address} did not answer CONNECT within {timeout:g} s"
                )
            )
        if attempt.error is not None:
            self._abandon(client)
            raise attempt.error
        with self._lock:
            self._attempt = None

    def start(self) -> None:
        """Connect in the background and keep trying with the reconnect policy; returns at once.

        Watch `state` / `add_listener` for the outcome. Raises ConfigError for unreadable secrets or certificates.
        """
        client = self._client_for_attempt()
        with self._lock:
            self._attempt = None
        self._set_state(ConnectionState.CONNECTING)
        client.connect_async(
            self.settings.host, self.settings.effective_port, self.settings.keepalive_s, **self._connect_args()
        )
        client.loop_start()

    def disconnect(self, flush_timeout: float = 0.0) -> None:
        """Send DISCONNECT (the will is not published) and stop paho's thread; idempotent.

        With `flush_timeout` > 0 and a live connection, first wait up to that long for queued QoS>0 messages.
        """
        if flush_timeout > 0 and self.is_connected:
            self.flush(flush_timeout)
        with self._lock:
            client, self._paho = self._paho, None
            was = self._state
        self._set_state(ConnectionState.CLOSED)
        if client is not None and was is not ConnectionState.IDLE:
            client.disconnect()
            client.loop_stop()

    def flush(self, timeout: float) -> bool:
        """Wait until every QoS>0 message handed to paho has been acknowledged; False after `timeout` seconds."""
        return self._publish_acks.wait_until_settled(timeout)

    def __enter__(self) -> MqttClient:
        self.connect()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.disconnect()

    # --- publish / subscribe -----------------------------------------------------------------------

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
        _check_topic(topic)
        if qos not in (0, 1, 2):
            raise ValueError(f"expected qos 0, 1 or 2, got {qos}")
        client = self._live_client("publish")
        properties = self._publish_properties(response_topic, correlation_data)
        info = client.publish(topic, payload, qos=qos, retain=retain, properties=properties)
        if info.rc == MQTTErrorCode.MQTT_ERR_QUEUE_SIZE:
            raise QueueFullError(
                f"MQTT outgoing queue to {self.settings.address} is full ({self.max_queued} messages); "
                f"message to {topic!r} not accepted"
            )
        queued = info.rc == MQTTErrorCode.MQTT_ERR_SUCCESS or (info.rc == MQTTErrorCode.MQTT_ERR_NO_CONN and qos > 0)
        if not queued:
            raise NotConnectedError(
                f"not connected to MQTT broker {self.settings.address} ({paho.error_string(info.rc)}); "
                f"QoS {qos} message to {topic!r} dropped"
            )
        timeout = self._wait_timeout(wait)
        if timeout is None:
            self._publish_acks.ignore(info.mid, lost_with_connection=qos == 0)
            return PublishResult(mid=info.mid, queued=True, acknowledged=False)
        reason = self._publish_acks.claim(info.mid, timeout, lost_with_connection=qos == 0)
        if reason is None:
            raise AckTimeoutError(
                f"MQTT broker {self.settings.address} did not acknowledge the publish to {topic!r} "
                f"within {timeout:g} s (QoS {qos}; it stays queued)"
            )
        if reason.is_failure:
            raise PublishRejectedError(
                f"MQTT broker {self.settings.address} rejected the publish to {topic!r}: "
                f"{reason} (reason code 0x{reason.value:02X})",
                reason_code=reason.value,
                reason=str(reason),
            )
        return PublishResult(mid=info.mid, queued=True, acknowledged=True, reason_code=reason.value, reason=str(reason))

    def subscribe(self, topic_filter: str, handler: MessageHandler, qos: int = 1, timeout: float | None = None) -> int:
        """Subscribe and route matching messages to `handler` (called on paho's thread); returns the granted QoS.

        The subscription is renewed after every reconnect that lost the session. While reconnecting it is
        only recorded (returns `qos`). Raises SubscribeRejectedError or AckTimeoutError.
        Note: Mosquitto *grants* subscriptions its ACL forbids and then delivers nothing.
        """
        if qos not in (0, 1, 2):
            raise ValueError(f"expected qos 0, 1 or 2, got {qos}")
        client = self._live_client("subscribe")
        with self._lock:
            self._subscriptions[topic_filter] = _Subscription(qos=qos, handler=handler)
        rc, mid = client.subscribe(topic_filter, qos=qos)
        if rc == MQTTErrorCode.MQTT_ERR_NO_CONN or mid is None:
            with self._lock:
                self._unsent.add(topic_filter)
            return qos  # sent by _on_connect
        timeout = self.settings.publish_timeout_s if timeout is None else timeout
        reasons = self._subscribe_acks.claim(mid, timeout)
        if reasons is None:
            raise AckTimeoutError(
                f"MQTT broker {self.settings.address} did not acknowledge the subscription to {topic_filter!r} "
                f"within {timeout:g} s"
            )
        reason = reasons[0]
        if reason.is_failure:
            with self._lock:
                self._subscriptions.pop(topic_filter, None)
            raise SubscribeRejectedError(
                f"MQTT broker {self.settings.address} refused the subscription to {topic_filter!r}: "
                f"{reason} (reason code 0x{reason.value:02X})",
                reason_code=reason.value,
                reason=str(reason),
            )
        return reason.value

    def unsubscribe(self, topic_filter: str) -> None:
        with self._lock:
            known = self._subscriptions.pop(topic_filter, None) is not None
            self._unsent.discard(topic_filter)
            client = self._paho
        if known and client is not None and self.is_connected:
            client.unsubscribe(topic_filter)

    # --- paho set-up -------------------------------------------------------------------------------

    def _client_for_attempt(self) -> paho.Client:
        with self._lock:
            if self._state in (ConnectionState.CONNECTING, ConnectionState.CONNECTED, ConnectionState.RECONNECTING):
                raise MqttError(f"MQTT client for {self.settings.address} is already {self._state.value}")
            if self._paho is None:
                self._paho = self._build()
            return self._paho

    def _build(self) -> paho.Client:
        settings = self.settings
        v5 = settings.protocol is MqttProtocol.V5
        client = paho.Client(
            CallbackAPIVersion.VERSION2,
            client_id=settings.client_id,
            protocol=paho.MQTTv5 if v5 else paho.MQTTv311,
            clean_session=None if v5 else settings.clean_start,
        )
        client.suppress_exceptions = True
        client.connect_timeout = settings.connect_timeout_s
        client.reconnect_delay_set(settings.reconnect.min_delay_s, settings.reconnect.max_delay_s)  # type: ignore[arg-type]
        client.max_queued_messages_set(self.max_queued)
        if settings.username is not None:
            client.username_pw_set(settings.username, read_password(settings))
        if settings.tls is not None:
            client.tls_set_context(ssl_context_from(settings.tls))
            client.tls_insecure_set(not settings.tls.verify_hostname)
        if settings.will is not None:
            will = settings.will
            client.will_set(will.topic, will.payload, qos=will.qos, retain=will.retain)
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        client.on_connect_fail = self._on_connect_fail
        client.on_publish = self._on_publish
        client.on_subscribe = self._on_subscribe
        client.on_message = self._on_message
        client.on_log = self._on_log
        return client

    def _connect_args(self) -> dict[str, Any]:
        if self.settings.protocol is not MqttProtocol.V5:
            return {}
        properties = Properties(PacketTypes.CONNECT)
        properties.SessionExpiryInterval = 0 if self.settings.clean_start else self.settings.session_expiry_s
        return {"clean_start": self.settings.clean_start, "properties": properties}

    def _publish_properties(self, response_topic: str | None, correlation_data: bytes | None) -> Properties | None:
        if response_topic is None and correlation_data is None:
            return None
        if self.settings.protocol is not MqttProtocol.V5:
            raise ValueError("response_topic and correlation_data need protocol v5")
        properties = Properties(PacketTypes.PUBLISH)
        if response_topic is not None:
            properties.ResponseTopic = response_topic
        if correlation_data is not None:
            properties.CorrelationData = correlation_data
        return properties

    def _live_client(self, action: str) -> paho.Client:
        with self._lock:
            client, state = self._paho, self._state
        if client is None or state in (ConnectionState.IDLE, ConnectionState.CLOSED):
            raise NotConnectedError(
                f"cannot {action}: MQTT client for {self.settings.address} is {state.value}; call connect() first"
            )
        return client

    def _wait_timeout(self, wait: bool | float) -> float | None:
        if wait is True:
            return self.settings.publish_timeout_s
        if wait is False:
            return None
        if wait <= 0:
            raise ValueError(f"expected wait to be a bool or a positive number of seconds, got {wait}")
        return float(wait)

    def _abandon(self, client: paho.Client) -> None:
        """Undo a failed connect(): no thread, no socket, no retries."""
        with self._lock:
            self._attempt = None
            if self._paho is client:
                self._paho = None
        self._set_state(ConnectionState.CLOSED)
        client.disconnect()
        client.loop_stop()

    def _lost_before_connack(self) -> MqttError:
        with self._lock:
            detail = self._last_error
        return error_from_early_close(self.settings, detail)

    # --- paho callbacks (paho's thread) ------------------------------------------------------------

    def _on_log(self, client: paho.Client, userdata: Any, level: int, text: str) -> None:
        """paho's log lines go to the 'edge_sdk.mqtt.client.paho' logger; its errors are kept for messages.

        Socket errors are expected while reconnecting (warnings) and after disconnect() (debug).
        """
        with self._lock:
            if level in (paho.MQTT_LOG_ERR, paho.MQTT_LOG_WARNING):
                self._last_error = text
            closed = self._state in (ConnectionState.CLOSED, ConnectionState.IDLE)
        if level in (paho.MQTT_LOG_ERR, paho.MQTT_LOG_WARNING):
            routine = closed or text.startswith("Client is not connected")  # paho's loop between attempts
            _paho_log.log(logging.DEBUG if routine else logging.WARNING, "%s", text)
        elif level in (paho.MQTT_LOG_NOTICE, paho.MQTT_LOG_INFO):
            _paho_log.info("%s", text)
        else:
            _paho_log.debug("%s", text)

    def _on_connect(
        self, client: paho.Client, userdata: Any, flags: Any, reason: ReasonCode, properties: Properties | None
    ) -> None:
        with self._lock:
            attempt = self._attempt
        if reason.is_failure:
            error = refusal_from_connack(self.settings, reason.value, str(reason))
            if attempt is not None:
                attempt.finish(error)
            else:
                log.warning("%s; retrying with back-off", error)
            return
        with self._lock:
            self.connects += 1
            renew = [
                (topic_filter, subscription)
                for topic_filter, subscription in self._subscriptions.items()
                if not flags.session_present or topic_filter in self._unsent
            ]
            self._unsent.clear()
        # Subscriptions lost with the session are renewed first; the state turns CONNECTED when the
        # broker has acknowledged them, so "connected" means messages reach the handlers again.
        # (SUBACKs are read on this same thread, so none can arrive before the set is filled.)
        renewing = set()
        for topic_filter, subscription in renew:
            _, mid = client.subscribe(topic_filter, qos=subscription.qos)
            if mid is not None:
                renewing.add(mid)
        with self._lock:
            self._renewing = renewing
            self._connack_reason = reason
        if not renewing:
            self._now_connected()

    def _now_connected(self) -> None:
        with self._lock:
            attempt, reason = self._attempt, self._connack_reason
            self._last_error = ""
        if self.state is ConnectionState.RECONNECTING:
            log.info("reconnected to MQTT broker %s", self.settings.address)
        self._set_state(ConnectionState.CONNECTED, reason.value if reason else 0, str(reason) if reason else "")
        if attempt is not None:
            attempt.finish()

    def _on_disconnect(
        self, client: paho.Client, userdata: Any, flags: Any, reason: ReasonCode, properties: Properties | None
    ) -> None:
        self._publish_acks.connection_lost()
        with self._lock:
            self._renewing = set()
            attempt, state, detail = self._attempt, self._state, self._last_error
        if attempt is not None and not attempt.done.is_set():
            attempt.finish(self._lost_before_connack())
            return
        if state is ConnectionState.CONNECTED:
            text = f"{reason}" + (f" ({detail})" if detail and reason.is_failure else "")
            log.warning("lost MQTT broker %s: %s; reconnecting with back-off", self.settings.address, text)
            self._set_state(ConnectionState.RECONNECTING, reason.value, text)

    def _on_connect_fail(self, client: paho.Client, userdata: Any) -> None:
        log.debug("MQTT broker %s still unreachable; retrying with back-off", self.settings.address)

    def _on_publish(
        self, client: paho.Client, userdata: Any, mid: int, reason: ReasonCode, properties: Properties | None
    ) -> None:
        if reason.is_failure:
            with self._lock:
                self.rejected_publishes += 1
            log.debug("MQTT broker %s rejected publish mid %d: %s", self.settings.address, mid, reason)
        self._publish_acks.record(mid, reason)

    def _on_subscribe(
        self, client: paho.Client, userdata: Any, mid: int, reasons: list[ReasonCode], properties: Properties | None
    ) -> None:
        with self._lock:
            renewed = mid in self._renewing
            self._renewing.discard(mid)
            all_renewed = renewed and not self._renewing
        if not renewed:
            self._subscribe_acks.record(mid, reasons)
            return
        if reasons and reasons[0].is_failure:
            log.warning("MQTT broker %s refused a renewed subscription: %s", self.settings.address, reasons[0])
        if all_renewed:
            self._now_connected()

    def _on_message(self, client: paho.Client, userdata: Any, raw: paho.MQTTMessage) -> None:
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
            handlers = [s.handler for f, s in self._subscriptions.items() if paho.topic_matches_sub(f, raw.topic)]
        for handler in handlers:
            try:
                handler(message)
            except Exception:  # one handler's bug must not stop delivery to the others or paho's thread
                log.exception("MQTT message handler %r failed on a message to %s", handler, message.topic)


def _check_topic(topic: str) -> None:
    if not topic or "+" in topic or "#" in topic:
        raise ValueError(f"expected a topic name without wildcards, got {topic!r}")
