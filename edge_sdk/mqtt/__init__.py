"""The SDK's one MQTT client (paho-mqtt 2.x underneath): settings, typed errors, connection state, disk spool."""

from __future__ import annotations

from .client import MqttClient
from .errors import (
    AckTimeoutError,
    BrokerUnreachableError,
    ConnectRefusedError,
    MqttError,
    NotConnectedError,
    PublishRejectedError,
    QueueFullError,
    SpoolError,
    SpoolFullError,
    SubscribeRejectedError,
    TlsHandshakeError,
)
from .messages import Message, MessageHandler, PublishResult
from .settings import MqttProtocol, MqttSettings, ReconnectPolicy, SpoolSettings, TlsSettings, Will
from .spool import DiskSpool, SpooledMessage, SpoolStats
from .state import ConnectionEvent, ConnectionListener, ConnectionState

__all__ = [
    "AckTimeoutError",
    "BrokerUnreachableError",
    "ConnectRefusedError",
    "ConnectionEvent",
    "ConnectionListener",
    "ConnectionState",
    "DiskSpool",
    "Message",
    "MessageHandler",
    "MqttClient",
    "MqttError",
    "MqttProtocol",
    "MqttSettings",
    "NotConnectedError",
    "PublishRejectedError",
    "PublishResult",
    "QueueFullError",
    "ReconnectPolicy",
    "SpoolError",
    "SpoolFullError",
    "SpoolSettings",
    "SpoolStats",
    "SpooledMessage",
    "SubscribeRejectedError",
    "TlsHandshakeError",
    "TlsSettings",
    "Will",
]
