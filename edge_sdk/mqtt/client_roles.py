"""What the SDK's components need of an MQTT client, as Protocols: `MqttClient` has all of it, and a test
can hand a component a stand-in that records instead of talking to a broker."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from .messages import MessageHandler
from .publishing import Payload
from .settings import MqttSettings
from .state import ConnectionListener


class PublishingClient(Protocol):
    """A client a component only publishes through (the results forwarder)."""

    settings: MqttSettings

    @property
    def is_connected(self) -> bool: ...

    def publish(
        self,
        topic: str,
        payload: Payload = None,
        *,
        qos: int = 0,
        retain: bool = False,
        wait: bool | float = True,
        response_topic: str | None = None,
        correlation_data: bytes | None = None,
    ) -> object:
        """MqttClient.publish; the options go by name (a stand-in may take them as **options)."""


class AgentClient(PublishingClient, Protocol):
    """What the device agent does with its one connection: start and stop it, follow it, subscribe."""

    def start(self) -> None: ...

    def disconnect(self, flush_timeout: float = 0.0) -> None: ...

    def add_listener(self, listener: ConnectionListener) -> Callable[[], None]: ...

    def subscribe(
        self, topic_filter: str, handler: MessageHandler, qos: int = 1, timeout: float | None = None
    ) -> int: ...
