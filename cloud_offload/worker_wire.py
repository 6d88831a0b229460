"""The worker's side of the offload wire: its MQTT connection, which requests it answers at all, and
the bytes of its answers.

A request is answered only on its sender's own response topic (`edge/<device>/offload/resp` for a
request on `edge/<device>/offload/req/...`) and only with correlation data to echo: anything else is
dropped unanswered, so a client cannot make the worker publish to another device's topic (the
broker's ACL should stop it first; the worker does not rely on that).
"""

from __future__ import annotations

import logging

import numpy as np
import paho.mqtt.client as paho

from edge_sdk.core.errors import ConfigError
from edge_sdk.mqtt import MqttClient, MqttSettings
from edge_sdk.mqtt.messages import Message, MessageHandler
from edge_sdk.mqtt.settings import MqttProtocol, Will

from . import tensor_codec
from .protocol import ERROR_TENSOR, WORKER_MS_TENSOR, ProtocolError, RequestAddress, parse_request_topic, response_topic
from .tensor_codec import Precision, TensorPayload

log = logging.getLogger("cloud_offload.worker")

MAX_CORRELATION_BYTES = 256


class Refused(Exception):
    """A request the worker drops without an answer; `reason` names the kind, the message the case."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason


def worker_mqtt_settings(broker: MqttSettings, worker_id: str, will_topic: str) -> MqttSettings:
    """The broker file's settings as the worker connects with them: its id as the client id, a fresh
    session every time (requests must never queue for a worker while it is away) and a retained
    empty last will on its load topic, which clears its report when it dies."""
    if broker.protocol is not MqttProtocol.V5:
        raise ConfigError("the offload worker needs MQTT v5 (request/response): set protocol: v5")
    return broker.model_copy(
        update={
            "client_id": worker_id,
            "clean_start": True,
            "will": Will(topic=will_topic, payload="", qos=1, retain=True),
        }
    )


def check_request(message: Message) -> tuple[RequestAddress, str, bytes]:
    """(where it came from, the response topic, the correlation data) of a request the worker may
    answer; Refused otherwise."""
    try:
        address = parse_request_topic(message.topic)
        expected = response_topic(address.device)
    except (ProtocolError, ConfigError) as exc:
        raise Refused("malformed request topic", str(exc)) from None
    if message.response_topic != expected:
        raise Refused(
            "wrong response topic",
            f"a request on {message.topic} asks for answers on {message.response_topic!r}, not {expected}",
        )
    correlation = message.correlation_data
    if not correlation or len(correlation) > MAX_CORRELATION_BYTES:
        raise Refused(
            "bad correlation data",
            f"a request on {message.topic} has {len(correlation or b'')} bytes of it "
            f"(expected 1 to {MAX_CORRELATION_BYTES})",
        )
    return address, expected, correlation


def output_answer(
    request: TensorPayload, outputs: dict[str, np.ndarray], queued_ms: float, compute_ms: float, precision: Precision
) -> bytes:
    """The outputs, the request's frame id and deadline, and the worker's times; PayloadError when the
    outputs cannot be sent (a dtype the codec does not carry)."""
    tensors = {**outputs, WORKER_MS_TENSOR: np.array([queued_ms, compute_ms], np.float32)}
    return tensor_codec.encode(TensorPayload(request.frame_id, request.deadline, tensors), precision, "zstd")


def error_answer(request: TensorPayload | None, error: str) -> bytes:
    """Why the worker computed nothing; frame id and deadline 0 when the request did not decode."""
    frame_id, deadline = (request.frame_id, request.deadline) if request is not None else (0, 0.0)
    body = {ERROR_TENSOR: np.frombuffer(error.encode("utf-8"), np.uint8)}
    return tensor_codec.encode(TensorPayload(frame_id, deadline, body), compression="none")


class SharedSubscriber(MqttClient):
    """An MqttClient that hands the messages of one shared subscription (`$share/<group>/<filter>`)
    to its handler. The SDK's dispatch matches a message's topic against each filter as written, and
    a shared filter never matches the plain topic the broker delivers; until it strips the share
    prefix itself, this does, for the one filter."""

    def __init__(self, settings: MqttSettings, shared_filter: str, handler: MessageHandler):
        super().__init__(settings)
        self.shared_filter = shared_filter
        self._plain_filter = shared_filter.split("/", 2)[2]
        self._shared_handler = handler

    def subscribe_shared(self, qos: int = 1) -> int:
        return self.subscribe(self.shared_filter, self._shared_handler, qos=qos)

    def _hook_message(self, raw: paho.MQTTMessage) -> None:
        if not paho.topic_matches_sub(self._plain_filter, raw.topic):
            super()._hook_message(raw)
            return
        properties = raw.properties
        message = Message(
            raw.topic,
            bytes(raw.payload),
            raw.qos,
            bool(raw.retain),
            getattr(properties, "ResponseTopic", None),
            getattr(properties, "CorrelationData", None),
        )
        try:
            self._shared_handler(message)
        except Exception:  # a bug in the handler must not stop paho's thread
            log.exception("offload worker: the request on %s failed", raw.topic)
