"""MQTT errors: each one is a `BrokerError` and carries the MQTT reason code when the broker gave one."""

from __future__ import annotations

from edge_sdk.core.errors import BrokerError


class MqttError(BrokerError):
    """A broker refused, dropped or did not answer something this client asked for.

    `reason_code` is the MQTT v5 reason code (e.g. 0x87 "Not authorized"); for MQTT 3.1.1 CONNACK codes
    paho's v5 equivalent is used. It is None when no broker answer was involved (unreachable, timeout).
    """

    def __init__(self, message: str, reason_code: int | None = None, reason: str | None = None):
        super().__init__(message)
        self.reason_code = reason_code
        self.reason = reason


class BrokerUnreachableError(MqttError):
    """No MQTT conversation could start: unknown host, connection refused, no answer in time."""


class TlsHandshakeError(MqttError):
    """The TLS handshake failed: untrusted or mismatched certificate, or a client certificate was required."""


class ConnectRefusedError(MqttError):
    """The broker answered CONNECT with a failure reason code (bad credentials, not authorised, ...)."""


class NotConnectedError(MqttError):
    """The operation needs a live connection and there is none (e.g. a QoS 0 publish while reconnecting)."""


class PublishRejectedError(MqttError):
    """The broker acknowledged a publish with a failure reason code (MQTT v5 only, e.g. 0x87)."""


class SubscribeRejectedError(MqttError):
    """The broker refused a subscription in its SUBACK."""


class QueueFullError(MqttError):
    """The client's outgoing queue (max_queued) is full; the message was not accepted."""


class AckTimeoutError(MqttError):
    """No acknowledgement arrived from the broker within the timeout."""


class SpoolError(MqttError):
    """The client's disk spool cannot be used (in use by another process, unreadable, not writable)."""


class SpoolFullError(SpoolError, QueueFullError):
    """The disk spool cannot take this message (larger than max_bytes, or the disk is full)."""
