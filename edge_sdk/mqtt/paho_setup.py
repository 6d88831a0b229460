"""Setting paho up for one `MqttSettings`: the configured paho client, CONNECT arguments, paho's log lines,
and the outcome of one blocking connect attempt.

Nothing here holds a connection open; `edge_sdk.mqtt.connection.Connection` drives the lifecycle.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from .credentials import read_password
from .errors import MqttError
from .settings import MqttProtocol, MqttSettings
from .tls import ssl_context_from

PAHO_LOG = logging.getLogger("edge_sdk.mqtt.client.paho")


def build_paho(settings: MqttSettings, max_queued: int) -> paho.Client:
    """A paho VERSION2 client configured from `settings` (no callbacks yet; nothing connected).

    Reads the password and the TLS files, so it raises ConfigError when they cannot be read.
    """
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
    client.max_queued_messages_set(max_queued)
    if settings.username is not None:
        client.username_pw_set(settings.username, read_password(settings))
    if settings.tls is not None:
        client.tls_set_context(ssl_context_from(settings.tls))
        client.tls_insecure_set(not settings.tls.verify_hostname)
    if settings.will is not None:
        will = settings.will
        client.will_set(will.topic, will.payload, qos=will.qos, retain=will.retain)
    client.on_socket_open = _no_delay
    return client


def _no_delay(client: paho.Client, userdata: Any, sock: Any) -> None:
    """MQTT's small packets (PUBACKs, commands) go at once: with Nagle's algorithm one waits for the
    peer's delayed ACK behind a larger message, 40 ms on Linux (a request's PUBACK behind an answer)."""
    with contextlib.suppress(OSError, AttributeError):  # not a TCP socket (a websocket wrapper, a test double)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def connect_arguments(settings: MqttSettings) -> dict[str, Any]:
    """Keyword arguments for paho's connect()/connect_async(): clean start and session expiry (v5)."""
    if settings.protocol is not MqttProtocol.V5:
        return {}
    properties = Properties(PacketTypes.CONNECT)
    properties.SessionExpiryInterval = 0 if settings.clean_start else settings.session_expiry_s
    return {"clean_start": settings.clean_start, "properties": properties}


@dataclass
class ConnectAttempt:
    """The outcome of one blocking connect(), filled in from paho's thread."""

    done: threading.Event = field(default_factory=threading.Event)
    error: MqttError | None = None

    def finish(self, error: MqttError | None = None) -> None:
        if not self.done.is_set():
            self.error = error
            self.done.set()


class PahoLogRelay:
    """paho's on_log: its lines go to the 'edge_sdk.mqtt.client.paho' logger; its last error is kept for messages.

    Socket errors are expected while reconnecting (debug, not warning) and after disconnect() (`quiet()` is true).
    """

    def __init__(self, quiet: Callable[[], bool]) -> None:
        self._quiet = quiet
        self._lock = threading.Lock()
        self._last_error = ""

    @property
    def last_error(self) -> str:
        with self._lock:
            return self._last_error

    def clear(self) -> None:
        with self._lock:
            self._last_error = ""

    def __call__(self, client: paho.Client, userdata: Any, level: int, text: str) -> None:
        problem = level in (paho.MQTT_LOG_ERR, paho.MQTT_LOG_WARNING)
        if problem:
            with self._lock:
                self._last_error = text
            routine = self._quiet() or text.startswith("Client is not connected")  # paho's loop between attempts
            PAHO_LOG.log(logging.DEBUG if routine else logging.WARNING, "%s", text)
        elif level in (paho.MQTT_LOG_NOTICE, paho.MQTT_LOG_INFO):
            PAHO_LOG.info("%s", text)
        else:
            PAHO_LOG.debug("%s", text)
