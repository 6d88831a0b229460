"""The SDK's one MQTT client (paho-mqtt 2.x underneath): settings, typed errors, connection state."""

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
    SubscribeRejectedError,
    TlsHandshakeError,
)
from .messages import Message, MessageHandler, PublishResult
from .settings import MqttProtocol, MqttSettings, ReconnectPolicy, TlsSettings, Will
from .state import ConnectionEvent, ConnectionListener, ConnectionState

__all__ = [
    "AckTimeoutError",
    "BrokerUnreachableError",
    "ConnectRefusedError",
    "ConnectionEvent",
    "ConnectionListener",
    "ConnectionState",
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
    "SubscribeRejectedError",
    "TlsHandshakeError",
    "TlsSettings",
    "Will",
]
