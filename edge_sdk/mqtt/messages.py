"""What subscribers receive and what publish() returns."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Message:
    """One received PUBLISH."""

    topic: str
    payload: bytes
    qos: int
    retain: bool
    response_topic: str | None = None
    """MQTT v5 request/response: where the sender expects an answer."""
    correlation_data: bytes | None = None
    """MQTT v5 request/response: echo this in the answer."""

    def text(self) -> str:
        return self.payload.decode("utf-8")


MessageHandler = Callable[[Message], None]


@dataclass(frozen=True)
class PublishResult:
    """What became of one publish() call.

    `acknowledged` is True once the broker acknowledged it (QoS 1/2) or it was written to the socket (QoS 0);
    a publish made with wait=False returns before that, with acknowledged=False and `queued` saying whether
    paho holds it (it does for QoS>0 even while reconnecting). With a disk spool configured, a message
    published while the broker is away (or while earlier spooled messages are still being replayed) is
    `spooled`: written to the spool and sent later, in order; it then has no message id yet (mid 0).
    """

    mid: int
    queued: bool
    acknowledged: bool
    reason_code: int = 0
    reason: str = "Success"
    spooled: bool = False


@dataclass(frozen=True)
class PendingPublish:
    """A message handed to paho by `MqttClient.publish_tracked`, its acknowledgement still to come."""

    mid: int
    topic: str
    qos: int
    confirm: Callable[[int, str, int, float], PublishResult]

    def wait(self, timeout: float) -> PublishResult:
        """Wait up to `timeout` s for the broker's acknowledgement; raises as `MqttClient.publish` does."""
        return self.confirm(self.mid, self.topic, self.qos, timeout)
