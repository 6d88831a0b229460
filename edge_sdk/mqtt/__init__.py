"""The SDK's one MQTT client (paho-mqtt 2.x underneath): settings, typed errors, connection state, disk spool.

Names load on first use: the client imports paho, which a pipeline without an MQTT sink never needs,
while the settings and errors are read by every pipeline file's schema."""

from __future__ import annotations

from typing import TYPE_CHECKING

from edge_sdk.core.lazy_exports import lazy_exports

_EXPORTS = {
    "AckTimeoutError": "edge_sdk.mqtt.errors",
    "BrokerUnreachableError": "edge_sdk.mqtt.errors",
    "ConnectRefusedError": "edge_sdk.mqtt.errors",
    "ConnectionEvent": "edge_sdk.mqtt.state",
    "ConnectionListener": "edge_sdk.mqtt.state",
    "ConnectionState": "edge_sdk.mqtt.state",
    "DiskSpool": "edge_sdk.mqtt.spool",
    "Message": "edge_sdk.mqtt.messages",
    "MessageHandler": "edge_sdk.mqtt.messages",
    "MqttClient": "edge_sdk.mqtt.client",
    "MqttError": "edge_sdk.mqtt.errors",
    "MqttProtocol": "edge_sdk.mqtt.settings",
    "MqttSettings": "edge_sdk.mqtt.settings",
    "NotConnectedError": "edge_sdk.mqtt.errors",
    "PublishRejectedError": "edge_sdk.mqtt.errors",
    "PublishResult": "edge_sdk.mqtt.messages",
    "QueueFullError": "edge_sdk.mqtt.errors",
    "ReconnectPolicy": "edge_sdk.mqtt.settings",
    "SpoolError": "edge_sdk.mqtt.errors",
    "SpoolFullError": "edge_sdk.mqtt.errors",
    "SpoolSettings": "edge_sdk.mqtt.settings",
    "SpoolStats": "edge_sdk.mqtt.spool",
    "SpooledMessage": "edge_sdk.mqtt.spool",
    "SubscribeRejectedError": "edge_sdk.mqtt.errors",
    "TlsHandshakeError": "edge_sdk.mqtt.errors",
    "TlsSettings": "edge_sdk.mqtt.settings",
    "Will": "edge_sdk.mqtt.settings",
}

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

if TYPE_CHECKING:
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

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
