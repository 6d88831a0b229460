"""`Connection`: one paho client's life, as an explicit state machine.

connect() blocks until CONNACK and says *why* it failed (typed `MqttError`s with the MQTT reason
code); start() connects in the background; paho's network thread (`loop_start`) reconnects by
itself with the settings' back-off; disconnect() ends it. paho's callbacks arrive here and are
routed to hook methods that `MqttClient` fills in (subscriptions, acknowledgements, the spool).

Rule: never call into paho while holding `self._lock` (paho calls back into us while holding its own locks).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import MQTTErrorCode
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

from .errors import BrokerUnreachableError, MqttError, NotConnectedError
from .failures import error_from_connect_exception, error_from_early_close, refusal_from_connack
from .paho_setup import ConnectAttempt, PahoLogRelay, build_paho, connect_arguments
from .settings import MqttSettings
from .state import ConnectionListener, ConnectionState, StateMachine

log = logging.getLogger("edge_sdk.mqtt.client")

RUNNING = (ConnectionState.CONNECTING, ConnectionState.CONNECTED, ConnectionState.RECONNECTING)


class Connection:
    """The lifecycle half of `MqttClient`; override the `_hook_*` methods to act on paho's events."""

    def __init__(self, settings: MqttSettings, max_queued: int = 0):
        if max_queued < 0:
            raise ValueError(f"expected max_queued >= 0, got {max_queued}")
        self.settings = settings
        self.max_queued = max_queued
        self._lock = threading.RLock()
        self._machine = StateMachine(log)
        self._paho_log = PahoLogRelay(quiet=lambda: self.state in (ConnectionState.CLOSED, ConnectionState.IDLE))
        self._attempt: ConnectAttempt | None = None
        self._connack_reason: ReasonCode | None = None
        self._max_packet_size: int | None = None
        self._paho: paho.Client | None = None
        self.connects = 0
        """Successful CONNACKs so far (the first connect and every reconnect)."""

    # --- state -------------------------------------------------------------------------------------

    @property
    def state(self) -> ConnectionState:
        return self._machine.state

    @property
    def is_connected(self) -> bool:
        return self.state is ConnectionState.CONNECTED

    @property
    def max_packet_size(self) -> int | None:
        """The largest MQTT packet, in bytes, the broker accepts: the "Maximum Packet Size" of its last
        CONNACK (MQTT v5); None when it set no limit, over MQTT 3.1.1, and before the first connect.

        A PUBLISH larger than this (topic, properties and payload) makes the broker close the connection.
        """
        with self._lock:
            return self._max_packet_size

    def add_listener(self, listener: ConnectionListener) -> Callable[[], None]:
        """Call `listener` on every state change (from paho's thread); returns a function that removes it."""
        return self._machine.add_listener(listener)

    def wait_for_state(self, state: ConnectionState, timeout: float) -> bool:
        """Block until the connection is in `state`; False after `timeout` seconds."""
        return self._machine.wait_for(state, timeout)

    # --- connect / disconnect ----------------------------------------------------------------------

    def connect(self, timeout: float | None = None) -> None:
        """Connect and wait for the broker's CONNACK; afterwards paho keeps the connection (reconnecting as needed).

        Raises ConfigError for unreadable secrets or certificate files, BrokerUnreachableError,
        TlsHandshakeError or ConnectRefusedError (with the reason code); after a failure nothing keeps running.
        """
        timeout = self.settings.connect_timeout_s if timeout is None else timeout
        client = self._client_for_attempt()
        attempt = ConnectAttempt()
        with self._lock:
            self._attempt = attempt
        self._paho_log.clear()
        self._machine.set(ConnectionState.CONNECTING)
        deadline = time.monotonic() + timeout
        try:
            rc = client.connect(self.settings.host, self.settings.effective_port, **self._connect_args())
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
        self._machine.set(ConnectionState.CONNECTING)
        client.connect_async(self.settings.host, self.settings.effective_port, **self._connect_args())
        client.loop_start()

    def disconnect(self, flush_timeout: float = 0.0) -> None:
        """Send DISCONNECT (the will is not published) and stop paho's thread; idempotent.

        With `flush_timeout` > 0 and a live connection, first wait up to that long for queued QoS>0 messages.
        """
        if flush_timeout > 0 and self.is_connected:
            self.flush(flush_timeout)
        with self._lock:
            client, self._paho = self._paho, None
        was = self.state
        self._machine.set(ConnectionState.CLOSED)
        if client is not None and was is not ConnectionState.IDLE:
            client.disconnect()
            client.loop_stop()
        self._hook_closed()

    def flush(self, timeout: float) -> bool:
        """Wait until what was handed over has been acknowledged; False after `timeout` seconds."""
        raise NotImplementedError

    # --- hooks for the publishing and subscribing side (paho's thread unless noted) ----------------

    def _hook_opening(self) -> None:
        """connect()/start() is about to build a paho client (caller's thread)."""

    def _hook_closed(self) -> None:
        """disconnect() has stopped paho's thread (caller's thread)."""

    def _hook_connack(self, client: paho.Client, session_present: bool) -> bool:
        """The broker accepted CONNECT; return True to hold CONNECTED back until `_now_connected()` is called."""
        return False

    def _hook_connected(self) -> None:
        """The state has just turned CONNECTED."""

    def _hook_connection_lost(self) -> None:
        """The connection closed (before or after CONNACK)."""

    def _hook_published(self, mid: int, reason: ReasonCode) -> None:
        """PUBACK/PUBCOMP arrived, or a QoS 0 packet was written."""

    def _hook_subscribed(self, mid: int, reasons: list[ReasonCode]) -> None:
        """A SUBACK arrived."""

    def _hook_message(self, raw: paho.MQTTMessage) -> None:
        """A PUBLISH arrived."""

    # --- lifecycle helpers -------------------------------------------------------------------------

    def _client_for_attempt(self) -> paho.Client:
        with self._lock:
            state = self.state
            if state in RUNNING:
                raise MqttError(f"MQTT client for {self.settings.address} is already {state.value}")
            if self._paho is None:
                self._hook_opening()
                self._paho = self._build()
            return self._paho

    def _build(self) -> paho.Client:
        client = build_paho(self.settings, self.max_queued)
        client.on_connect = self._on_connect
        client.on_disconnect = self._on_disconnect
        client.on_connect_fail = self._on_connect_fail
        client.on_publish = self._on_publish
        client.on_subscribe = self._on_subscribe
        client.on_message = self._on_message
        client.on_log = self._paho_log
        return client

    def _connect_args(self) -> dict[str, Any]:
        return {"keepalive": self.settings.keepalive_s, **connect_arguments(self.settings)}

    def _live_client(self, action: str) -> paho.Client:
        with self._lock:
            client = self._paho
        state = self.state
        if client is None or state in (ConnectionState.IDLE, ConnectionState.CLOSED):
            raise NotConnectedError(
                f"cannot {action}: MQTT client for {self.settings.address} is {state.value}; call connect() first"
            )
        return client

    def _abandon(self, client: paho.Client) -> None:
        """Undo a failed connect(): no thread, no socket, no retries."""
        with self._lock:
            self._attempt = None
            if self._paho is client:
                self._paho = None
        self._machine.set(ConnectionState.CLOSED)
        client.disconnect()
        client.loop_stop()
        self._hook_closed()

    def _lost_before_connack(self) -> MqttError:
        return error_from_early_close(self.settings, self._paho_log.last_error)

    def _now_connected(self) -> None:
        with self._lock:
            attempt, reason = self._attempt, self._connack_reason
        self._paho_log.clear()
        if self.state is ConnectionState.RECONNECTING:
            log.info("reconnected to MQTT broker %s", self.settings.address)
        self._machine.set(ConnectionState.CONNECTED, reason.value if reason else 0, str(reason) if reason else "")
        self._hook_connected()
        if attempt is not None:
            attempt.finish()

    # --- paho callbacks (paho's thread) ------------------------------------------------------------

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
        limit = getattr(properties, "MaximumPacketSize", None) if properties is not None else None
        with self._lock:
            self.connects += 1
            self._connack_reason = reason
            self._max_packet_size = int(limit) if limit is not None else None
        if not self._hook_connack(client, flags.session_present):
            self._now_connected()

    def _on_disconnect(
        self, client: paho.Client, userdata: Any, flags: Any, reason: ReasonCode, properties: Properties | None
    ) -> None:
        self._hook_connection_lost()
        with self._lock:
            attempt = self._attempt
        if attempt is not None and not attempt.done.is_set():
            attempt.finish(self._lost_before_connack())
            return
        if self.state is ConnectionState.CONNECTED:
            detail = self._paho_log.last_error
            text = f"{reason}" + (f" ({detail})" if detail and reason.is_failure else "")
            log.warning("lost MQTT broker %s: %s; reconnecting with back-off", self.settings.address, text)
            self._machine.set(ConnectionState.RECONNECTING, reason.value, text)

    def _on_connect_fail(self, client: paho.Client, userdata: Any) -> None:
        log.debug("MQTT broker %s still unreachable; retrying with back-off", self.settings.address)

    def _on_publish(
        self, client: paho.Client, userdata: Any, mid: int, reason: ReasonCode, properties: Properties | None
    ) -> None:
        self._hook_published(mid, reason)

    def _on_subscribe(
        self, client: paho.Client, userdata: Any, mid: int, reasons: list[ReasonCode], properties: Properties | None
    ) -> None:
        self._hook_subscribed(mid, reasons)

    def _on_message(self, client: paho.Client, userdata: Any, raw: paho.MQTTMessage) -> None:
        self._hook_message(raw)
