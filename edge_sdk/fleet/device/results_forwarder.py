"""The agent's side of `type: agent` sinks: drain the results outbox to edge/<device>/results/<pipeline>/<source>.

One thread reads the outbox (edge_sdk.sinks.agent.ResultsOutbox) oldest first and publishes each entry at
QoS 1 through the agent's MqttClient, deleting it only once the client accepted it: acknowledged by
the broker, or written to the client's disk spool. While the broker is away and the client has no
spool, entries stay in the outbox (bounded, oldest evicted and counted) and go out in order after the
reconnect. Evictions are logged and reported on telemetry/results-outbox ({device, published, waiting,
evicted, rejected}). A publish the broker refuses (ACL) is dropped and counted, so it cannot block the rest.
Delivery is at least once: an acknowledgement lost with the connection means the entry is sent again.

Preview thumbnails (the outbox's `previews` table: the latest per pipeline and source) go out on a second
thread with its own connection to the file, so they never wait behind results nor hold them up: each
new one once, at QoS 0, only while connected (a thumbnail made offline waits in the outbox, the newest
per source replacing older ones), to telemetry/preview/<pipeline>/<source>.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

from edge_sdk.core.sqlite_stamp import Stamp, sqlite_stamp
from edge_sdk.fleet.wire.telemetry import MAX_PREVIEW_BYTES, PREVIEW
from edge_sdk.mqtt import MqttError, PublishRejectedError
from edge_sdk.mqtt.client_roles import PublishingClient
from edge_sdk.mqtt.topics import DeviceTopics
from edge_sdk.sinks.agent import PreviewEntry, ResultsOutbox

log = logging.getLogger(__name__)

IDLE_POLL_S = 0.1
MAX_IDLE_POLL_S = 1.0
"""While the outbox stays untouched the poll backs off to this (many agents in one process, idle boxes)."""
RETRY_S = 0.5
BATCH = 100
PREVIEW_TIMEOUT_S = 0.25
"""The preview thread's wait for the outbox's lock: a busy file means trying again on the next poll."""


@dataclass(frozen=True)
class ForwarderStats:
    published: int
    """Entries the client accepted (acknowledged or spooled) and removed from the outbox."""
    waiting: int
    """Entries still in the outbox."""
    evicted: int
    """Entries the outbox dropped, oldest first, because it held max_entries (since the outbox was created)."""
    rejected: int
    """Entries the broker refused (e.g. not authorised), dropped."""


class ResultForwarder:
    """Publishes the outbox's entries on the agent's connection (see the module docstring)."""

    def __init__(self, path: Path, client: PublishingClient, topics: DeviceTopics, max_entries: int):
        self.outbox = ResultsOutbox(path, create=True, max_entries=max_entries)
        self.path = path
        self._client = client
        self._topics = topics
        self._previews = ResultsOutbox(path, timeout=PREVIEW_TIMEOUT_S)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._published = 0
        self._rejected = 0
        self._evicted_seen = self.outbox.evicted()
        self.previews_published = 0

    def start(self) -> None:
        self._threads = [
            threading.Thread(target=self._run, name="edge-agent-results", daemon=True),
            threading.Thread(target=self._run_previews, name="edge-agent-previews", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout)
        self.outbox.close()
        self._previews.close()

    def stats(self) -> ForwarderStats:
        return ForwarderStats(self._published, self.outbox.waiting(), self.outbox.evicted(), self._rejected)

    def _run(self) -> None:
        idle_stamp: Stamp | None = None
        idle_wait = IDLE_POLL_S
        while not self._stop.is_set():
            stamp = self._file_stamp()
            if stamp == idle_stamp:  # nothing was written since the outbox was last found empty: no query
                self._stop.wait(idle_wait)
                idle_wait = min(idle_wait * 2, MAX_IDLE_POLL_S)
                continue
            idle_wait = IDLE_POLL_S
            try:
                sent = self.drain_once()
            except Exception:  # the outbox file or the client misbehaved: log and keep trying
                log.exception("results outbox: drain failed")
                sent = -1
            self._report_evictions()
            idle_stamp = stamp if sent == 0 else None
            self._stop.wait(IDLE_POLL_S if sent >= 0 else RETRY_S)

    def _file_stamp(self) -> Stamp:
        """Changes with any write by a sink."""
        return sqlite_stamp(self.path)

    def _run_previews(self) -> None:
        idle_stamp: Stamp | None = None
        idle_wait = IDLE_POLL_S
        while not self._stop.is_set():
            stamp = self._file_stamp()
            if stamp == idle_stamp:
                idle_wait = min(idle_wait * 2, MAX_IDLE_POLL_S)
            else:
                try:
                    waiting = self.send_previews()
                except Exception:  # e.g. the file is locked for longer than PREVIEW_TIMEOUT_S: next poll
                    log.debug("results outbox: previews not read", exc_info=True)
                    waiting = 1
                idle_stamp = stamp if waiting == 0 else None
                idle_wait = IDLE_POLL_S if waiting == 0 else RETRY_S
            self._stop.wait(idle_wait)

    def send_previews(self) -> int:
        """Publish each preview not sent yet (QoS 0, while connected); returns how many still wait."""
        waiting = 0
        for entry in self._previews.unsent_previews():
            if self._stop.is_set() or not self._client.is_connected:
                return waiting + 1
            if len(entry.jpeg) <= MAX_PREVIEW_BYTES and not self._publish_preview(entry):
                waiting += 1
                continue
            self._previews.preview_sent(entry)
        return waiting

    def _publish_preview(self, entry: PreviewEntry) -> bool:
        topic = self._topics.telemetry(PREVIEW, _level(entry.pipeline), _level(entry.source))
        try:
            self._client.publish(topic, entry.jpeg, qos=0, retain=False, wait=False)
        except MqttError as exc:
            log.debug("results outbox: preview %s not published: %s", topic, exc)
            return False
        self.previews_published += 1
        return True

    def drain_once(self) -> int:
        """Publish what waits (while publishing can succeed); -1 when it stopped on a failure, else the count."""
        if not (self._client.is_connected or self._client.settings.spool is not None):
            return -1
        sent = 0
        while not self._stop.is_set():
            entries = self.outbox.peek(BATCH)
            if not entries:
                return sent
            for entry in entries:
                if self._stop.is_set():
                    return sent
                topic = self._topics.results(_level(entry.pipeline), _level(entry.source))
                try:
                    self._client.publish(topic, entry.payload, qos=1, wait=True)
                except PublishRejectedError as exc:
                    self._rejected += 1
                    log.warning("results outbox: %s refused, dropped: %s", topic, exc)
                except MqttError as exc:
                    log.debug("results outbox: %s not published yet: %s", topic, exc)
                    return -1
                else:
                    self._published += 1
                    sent += 1
                self.outbox.delete(entry.id)
        return sent

    def _report_evictions(self) -> None:
        evicted = self.outbox.evicted()
        if evicted > self._evicted_seen:
            log.warning(
                "results outbox %s is full: %d oldest results evicted (%d in all)",
                self.path,
                evicted - self._evicted_seen,
                evicted,
            )
            self._evicted_seen = evicted
            stats = asdict(self.stats())
            payload = json.dumps({"device": self._topics.device, **stats})
            try:
                self._client.publish(self._topics.telemetry("results-outbox"), payload.encode(), qos=1, wait=False)
            except MqttError as exc:
                log.debug("results outbox telemetry not published: %s", exc)


def _level(name: str) -> str:
    """A topic level from a pipeline or source name ('/', '+', '#' become '_')."""
    return name.replace("/", "_").replace("+", "_").replace("#", "_").replace("\0", "_") or "_"
