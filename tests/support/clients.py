"""Client helpers: an inbox for messages from a real broker, and a recording stand-in for MqttClient."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from edge_sdk.fleet.device.agent import Agent
from edge_sdk.mqtt import ConnectionListener, Message, MessageHandler, MqttSettings
from edge_sdk.mqtt.publishing import Payload, payload_bytes


class Inbox:
    """A subscription handler that keeps what arrives and lets the test wait for it (bounded)."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self.messages: list[Message] = []

    def __call__(self, message: Message) -> None:
        with self._condition:
            self.messages.append(message)
            self._condition.notify_all()

    def wait_for(self, count: int, timeout: float = 10.0) -> list[Message]:
        """The first `count` messages, or all that came within `timeout` seconds if fewer did."""
        with self._condition:
            self._condition.wait_for(lambda: len(self.messages) >= count, timeout)
            return list(self.messages[:count])

    def wait(self, predicate: Callable[[Message], bool], what: str, timeout: float = 20.0) -> Message:
        """The latest message satisfying `predicate`, waiting up to `timeout` seconds; fails naming `what`."""
        with self._condition:
            found: list[Message] = []

            def check() -> bool:
                found[:] = [m for m in self.messages if predicate(m)]
                return bool(found)

            assert self._condition.wait_for(check, timeout), f"expected {what} within {timeout} s, got {self.messages}"
            return found[-1]

    def settle(self, quiet_s: float = 0.3) -> list[Message]:
        """Everything received once nothing new has come for `quiet_s` seconds."""
        with self._condition:
            seen = -1
            while seen != len(self.messages):
                seen = len(self.messages)
                self._condition.wait(quiet_s)
            return list(self.messages)


class RecordingClient:
    """Stands in for MqttClient (`Agent(config, client=RecordingClient)`): records what the agent publishes."""

    def __init__(self, settings: MqttSettings):
        self.settings = settings
        self.published: list[tuple[str, bytes, bytes | None]] = []
        self.is_connected = True

    def publish(self, topic: str, payload: Payload = None, **options: Any) -> None:
        self.published.append((topic, payload_bytes(payload), options.get("correlation_data")))

    def start(self) -> None:
        """Nothing to connect to."""

    def disconnect(self, flush_timeout: float = 0.0) -> None:
        self.is_connected = False

    def add_listener(self, listener: ConnectionListener) -> Callable[[], None]:
        return lambda: None

    def subscribe(self, topic_filter: str, handler: MessageHandler, qos: int = 1, timeout: float | None = None) -> int:
        return qos


def recording_client(agent: Agent) -> RecordingClient:
    """The agent's client, checked to be the RecordingClient it was built with."""
    client = agent.client
    assert isinstance(client, RecordingClient), f"the agent was built with {type(client).__name__}"
    return client
