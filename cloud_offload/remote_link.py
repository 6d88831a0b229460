"""The device's one MQTT connection for offload: requests out, answers and worker loads in, and the
link estimate made from that traffic.

Requests go out in order from a bounded backlog, each at QoS 1 with the time to its PUBACK measured,
up to WINDOW of them on their way at once (so a long round trip does not cap the requests to one per
RTT). The broker acknowledges a PUBLISH once it has all of it, so a PUBACK comes one round trip after
the message's last byte left, and the link serialises the messages: a request's own transfer is
from when it could start (sent, and one RTT before the previous PUBACK: the previous request's bytes
had left then) to one RTT before its PUBACK. A small probe (the offload counters, QoS 1, on the
device's own telemetry topic) is acknowledged in one round trip: the RTT. A PUBACK alone cannot tell
the two apart, so a probe goes out whenever the RTT sample is over a second old and no request is on
its way (a queue ahead of it would count as round trip): between requests, waiting at most
PROBE_DRAIN_S for those on their way. While no request has measured the bandwidth for a second
(the edge mode sends none), the idle probe is padded to PROBE_BYTES so its PUBACK does: 64 kbit/s at
most, and only while idle. A sample far off the estimate is held until two more agree
(link_estimator.py); an idle link is then probed again at once (every CONFIRM_EVERY_S), so a step up
while the edge computes everything is taken within about 1.5 s, not after three seconds of probes.

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
from edge_sdk.mqtt.messages import Message, PendingPublish
from edge_sdk.mqtt.topics import DeviceTopics

from .link_estimator import LinkEstimate, LinkEstimator
from .protocol import LOAD_ROOT, WorkerLoad, response_topic

log = logging.getLogger(__name__)

WORKER_REPORT_FRESH_S = 3.0
"""A worker's load report older than this (it reports every second) no longer counts it as present."""
PROBE_EVERY_S = 0.5
CONFIRM_EVERY_S = 0.15
"""How soon an idle link is probed again while a step of its estimate waits to be confirmed."""
RTT_STALE_S = 1.0
BANDWIDTH_STALE_S = 1.0
PROBE_BYTES = 8 * 1024
PROBE_DRAIN_S = 0.05
"""How long a stale RTT holds the next request back for the requests on their way to be acknowledged,
so that the probe's round trip has no queue ahead of it; a link busier than that keeps its last RTT
(the modes' own answers then correct what the estimate misses)."""
MIN_TRANSFER_S = 0.001
PUBLISH_PATIENCE_S = 5.0
WINDOW = 8
"""Requests handed to the broker and not yet acknowledged, at most."""


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
    deadline: float
    """time.monotonic() after which its PUBACK no longer matters (the frame is computed here by then)."""


@dataclass
class _Sent:
    item: _Outgoing
    pending: PendingPublish
    started: float


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
        self._sent: queue.Queue[_Sent | None] = queue.Queue()
        self._window = threading.BoundedSemaphore(WINDOW)
        self._on_the_way = 0
        self._settled = threading.Condition()
        self._acknowledger = threading.Thread(target=self._ack_loop, name="offload-acks", daemon=True)
        self._last_ack = -1e9
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
        self._acknowledger.start()

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

    def send(
        self,
        topic: str,
        payload: bytes,
        correlation: bytes,
        on_failed: Callable[[str], None],
        deadline: float | None = None,
    ) -> bool:
        """Queue a request; False when the backlog is full or the broker is away (the caller keeps the frame).
        `deadline` (time.monotonic()) bounds the wait for its PUBACK (default: PUBLISH_PATIENCE_S from now)."""
        if not self.connected or self._stopping.is_set():
            return False
        patience = deadline if deadline is not None else time.monotonic() + PUBLISH_PATIENCE_S
        try:
            self._outgoing.put_nowait(_Outgoing(topic, payload, correlation, on_failed, patience))
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
        self._sent.put(None)  # after what the sender queued: their PUBACKs are waited for first
        if self._acknowledger.is_alive():
            self._acknowledger.join(timeout=PUBLISH_PATIENCE_S)
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
            unconfirmed = self.estimator.bandwidth_unconfirmed or self.estimator.rtt_unconfirmed
            try:
                item = self._outgoing.get(timeout=CONFIRM_EVERY_S if unconfirmed else PROBE_EVERY_S)
            except queue.Empty:
                if self._drained(wait_s=0.0):
                    self._probe(probe_topic)
                continue
            if item is None:
                return
            if time.monotonic() - self._rtt_at > RTT_STALE_S and self._drained(wait_s=PROBE_DRAIN_S):
                self._probe(probe_topic)
            self._window.acquire()
            with self._settled:
                self._on_the_way += 1
            started = time.monotonic()
            try:
                pending = self.client.publish_tracked(
                    item.topic,
                    item.payload,
                    response_topic=response_topic(self.device),
                    correlation_data=item.correlation,
                )
            except MqttError as error:
                self._finished(item)
                item.on_failed(f"the request was not sent ({error})")
                continue
            self._sent.put(_Sent(item, pending, started))

    def _drained(self, wait_s: float) -> bool:
        """Wait up to `wait_s` until no request is on its way; False if some still are."""
        with self._settled:
            return self._settled.wait_for(lambda: self._on_the_way == 0, wait_s)

    def _ack_loop(self) -> None:
        """Each request's PUBACK, in the order they were sent (the broker acknowledges in that order)."""
        while (sent := self._sent.get()) is not None:
            try:
                self._acknowledged(sent)
            finally:
                self._finished(sent.item)

    def _acknowledged(self, sent: _Sent) -> None:
        try:
            sent.pending.wait(max(0.05, sent.item.deadline - time.monotonic()))
        except PublishRejectedError as error:
            self.rejected += 1
            sent.item.on_failed(f"the broker refused the request ({error.reason})")
            return
        except MqttError as error:
            sent.item.on_failed(f"the request was not acknowledged ({error})")
            return
        acknowledged = time.monotonic()
        rtt = self.estimator.estimate().rtt_s
        if rtt is not None:
            # its bytes could start once sent and the previous request's had left (one RTT before its PUBACK)
            begun = max(sent.started, self._last_ack - rtt)
            self._add_transfer(acknowledged, len(sent.item.payload), acknowledged - rtt - begun)
        self._last_ack = acknowledged

    def _finished(self, item: _Outgoing) -> None:
        """The request is acknowledged, refused or given up: its window slot and backlog bytes are free."""
        with self._lock:
            self._backlog_bytes -= len(item.payload)
        self._window.release()
        with self._settled:
            self._on_the_way -= 1
            self._settled.notify_all()

    def _add_transfer(self, at: float, nbytes: int, transfer_s: float) -> None:
        # Below a millisecond the RTT's own noise hides the transfer: the link carries at least this
        # message per millisecond, which is all a decision needs of a fast link.
        self.estimator.add_transfer(at, nbytes, max(transfer_s, MIN_TRANSFER_S))
        self._bandwidth_at = at

    def _probe(self, topic: str) -> None:
        """A round trip when the RTT is stale, else a padded message when the bandwidth is."""
        now = time.monotonic()
        measure_rtt = now - self._rtt_at > RTT_STALE_S or self.estimator.rtt_unconfirmed
        measure_bandwidth = now - self._bandwidth_at > BANDWIDTH_STALE_S or self.estimator.bandwidth_unconfirmed
        if not self.connected or not (measure_rtt or measure_bandwidth):
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
        rtt = self.estimator.estimate().rtt_s
        if measure_rtt:
            self.estimator.add_rtt(acknowledged, acknowledged - started)
            self._rtt_at = acknowledged
        elif rtt is not None:
            self._add_transfer(acknowledged, len(payload), acknowledged - started - rtt)
