"""The device's one MQTT connection for offload: requests out, answers and worker loads in, and the
link estimate made from that traffic.

Requests go out one at a time from a bounded backlog, each at QoS 1 with the time to its PUBACK
measured: the broker acknowledges a PUBLISH once it has all of it, so that time is the message's
bytes at the link's bandwidth plus one round trip. A small probe (the offload counters, QoS 1, on the
device's own telemetry topic) is acknowledged in one round trip: the RTT. A PUBACK alone cannot tell
the two apart, so a probe goes out whenever the RTT sample is over a second old, between requests if
the link is busy (one tiny message a second). While no request has measured the bandwidth for two
seconds (the edge mode sends none), the idle probe is padded to PROBE_BYTES so its PUBACK does:
64 kbit/s at most, and only while idle. Sending one request at a time costs up to one RTT between
requests; it keeps each PUBACK a clean sample, and the link serialises the bytes anyway.

A broker that is down when the pipeline starts is not an error: the connection is made in the
background with the broker file's reconnect policy, and until then (or while it is lost) every
frame is inferred on the edge.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from edge_sdk.mqtt import MqttClient, MqttSettings
from edge_sdk.mqtt.errors import MqttError, PublishRejectedError
from edge_sdk.mqtt.messages import Message
from edge_sdk.mqtt.topics import DeviceTopics

from .link_estimator import LinkEstimate, LinkEstimator
from .protocol import LOAD_ROOT, WorkerLoad, response_topic

log = logging.getLogger(__name__)

WORKER_REPORT_FRESH_S = 3.0
"""A worker's load report older than this (it reports every second) no longer counts it as present."""
PROBE_EVERY_S = 0.5
RTT_STALE_S = 1.0
BANDWIDTH_STALE_S = 2.0
PROBE_BYTES = 16 * 1024
MIN_TRANSFER_S = 0.001
PUBLISH_PATIENCE_S = 5.0


@dataclass(frozen=True)
class Answer:
    correlation: bytes
    payload: bytes
    arrived_at: float
    """time.monotonic() when it arrived."""


@dataclass
class _Outgoing:
    topic: str
    payload: bytes
    correlation: bytes
    on_failed: Callable[[str], None]


class RemoteLink:
    def __init__(
        self,
        settings: MqttSettings,
        device: str,
        on_answer: Callable[[Answer], None],
        probe_payload: Callable[[], dict[str, Any]] = dict,
        backlog: int = 16,
    ):
        self.device = device
        self.client = MqttClient(settings, max_queued=backlog * 2)
        self.estimator = LinkEstimator()
        self._on_answer = on_answer
        self._probe_payload = probe_payload
        self._outgoing: queue.Queue[_Outgoing | None] = queue.Queue(maxsize=backlog)
        self._backlog_bytes = 0
        self._lock = threading.Lock()
        self._loads: dict[str, tuple[float, WorkerLoad]] = {}
        self._stopping = threading.Event()
        self._sender = threading.Thread(target=self._send_loop, name="offload-sender", daemon=True)
        self._rtt_at = self._bandwidth_at = -1e9
        self.rejected = 0
        """Requests the broker refused (its ACL: a device may only publish under its own prefix)."""
        self.bad_load_reports = 0

    def start(self) -> None:
        """Connect in the background; never raises for the broker: until it answers, frames stay here."""
        self.client.start()
        for topic_filter, handler in ((response_topic(self.device), self._answer), (f"{LOAD_ROOT}/+", self._load)):
            try:
                self.client.subscribe(topic_filter, handler, qos=1)
            except MqttError as error:  # recorded all the same, and sent again on the next connect
                log.warning("offload: %s; frames stay on the edge until the broker answers", error)
        self._sender.start()

    @property
    def connected(self) -> bool:
        return self.client.is_connected

    @property
    def max_packet_size(self) -> int | None:
        """The broker's Maximum Packet Size (MQTT v5 CONNACK), None when it set none."""
        return getattr(self.client, "max_packet_size", None)

    def estimate(self) -> LinkEstimate:
        return self.estimator.estimate()

    @property
    def backlog_bytes(self) -> int:
        """Bytes of requests waiting to go out, and of the one going out now."""
        with self._lock:
            return self._backlog_bytes

    def send(self, topic: str, payload: bytes, correlation: bytes, on_failed: Callable[[str], None]) -> bool:
        """Queue a request; False when the backlog is full or the broker is away (the caller keeps the frame)."""
        if not self.connected or self._stopping.is_set():
            return False
        try:
            self._outgoing.put_nowait(_Outgoing(topic, payload, correlation, on_failed))
        except queue.Full:
            return False
        with self._lock:
            self._backlog_bytes += len(payload)
        return True

    def workers(self, model_key: str | None = None) -> list[WorkerLoad]:
        """Workers whose report is fresh (and that serve `model_key`, when given)."""
        now = time.monotonic()
        with self._lock:
            loads = [load for at, load in self._loads.values() if now - at < WORKER_REPORT_FRESH_S]
        return [load for load in loads if model_key is None or model_key in load.models]

    def close(self) -> None:
        self._stopping.set()
        with contextlib.suppress(queue.Full):
            self._outgoing.put_nowait(None)
        if self._sender.is_alive():
            self._sender.join(timeout=PUBLISH_PATIENCE_S)
        self.client.disconnect()

    # --- paho's thread ---------------------------------------------------------------------------

    def _answer(self, message: Message) -> None:
        if message.correlation_data is None:
            return
        self._on_answer(Answer(message.correlation_data, message.payload, time.monotonic()))

    def _load(self, message: Message) -> None:
        worker = message.topic.rsplit("/", 1)[-1]
        if not message.payload:  # a worker's will (or its clean stop) cleared its report
            with self._lock:
                self._loads.pop(worker, None)
            return
        try:
            load = WorkerLoad.model_validate_json(message.payload)
        except ValidationError:
            self.bad_load_reports += 1
            return
        if load.worker != worker:
            self.bad_load_reports += 1
            return
        with self._lock:
            self._loads[worker] = (time.monotonic(), load)

    # --- the sender thread -----------------------------------------------------------------------

    def _send_loop(self) -> None:
        probe_topic = DeviceTopics(self.device).telemetry("offload")
        while not self._stopping.is_set():
            try:
                item = self._outgoing.get(timeout=PROBE_EVERY_S)
            except queue.Empty:
                self._probe(probe_topic)
                continue
            if item is None:
                return
            if time.monotonic() - self._rtt_at > RTT_STALE_S:
                self._probe(probe_topic)
            try:
                self._publish(item)
            finally:
                with self._lock:
                    self._backlog_bytes -= len(item.payload)

    def _publish(self, item: _Outgoing) -> None:
        started = time.monotonic()
        try:
            self.client.publish(
                item.topic,
                item.payload,
                qos=1,
                wait=PUBLISH_PATIENCE_S,
                response_topic=response_topic(self.device),
                correlation_data=item.correlation,
            )
        except PublishRejectedError as error:
            self.rejected += 1
            item.on_failed(f"the broker refused the request ({error.reason})")
            return
        except MqttError as error:
            item.on_failed(f"the request was not acknowledged ({error})")
            return
        acknowledged = time.monotonic()
        self._add_transfer(acknowledged, len(item.payload), acknowledged - started)

    def _add_transfer(self, at: float, nbytes: int, elapsed: float) -> None:
        rtt = self.estimator.estimate().rtt_s
        if rtt is None:
            return
        # Below a millisecond the RTT's own noise hides the transfer: the link carries at least this
        # message per millisecond, which is all a decision needs of a fast link.
        self.estimator.add_transfer(at, nbytes, max(elapsed - rtt, MIN_TRANSFER_S))
        self._bandwidth_at = at

    def _probe(self, topic: str) -> None:
        """A round trip when the RTT is stale, else a padded message when the bandwidth is."""
        now = time.monotonic()
        measure_rtt = now - self._rtt_at > RTT_STALE_S
        if not self.connected or not (measure_rtt or now - self._bandwidth_at > BANDWIDTH_STALE_S):
            return
        body = self._probe_payload()
        payload = json.dumps(body if measure_rtt else {**body, "padding": "." * PROBE_BYTES})
        started = time.monotonic()
        try:
            self.client.publish(topic, payload, qos=1, wait=PUBLISH_PATIENCE_S)
        except MqttError as error:
            log.debug("offload probe not acknowledged: %s", error)
            return
        acknowledged = time.monotonic()
        if measure_rtt:
            self.estimator.add_rtt(acknowledged, acknowledged - started)
            self._rtt_at = acknowledged
        else:
            self._add_transfer(acknowledged, len(payload), acknowledged - started)
