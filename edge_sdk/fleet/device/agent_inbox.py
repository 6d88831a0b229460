"""The agent's inbox: its QoS 1 subscriptions and the one worker thread that handles what arrives.

    inbox = AgentInbox(client, name="edge-agent-cam-1", max_chunk_bytes=64 << 20)
    inbox.start()
    inbox.subscribe(topics.cmd, "command", on_command)
    inbox.subscribe_chunks(topics.artifacts("#"), on_chunk)
    ...
    inbox.stop(timeout=5.0)

Every message, and every job the agent submits itself, runs on the worker in arrival order, so paho's
network thread never waits for an engine build; a job that fails is logged and the worker goes on.
Chunks waiting for the worker are capped in bytes: one beyond the cap is dropped with a warning (the
operator sends again what `need_chunks` lists).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

from edge_sdk.mqtt import AckTimeoutError, ConnectionEvent, ConnectionState, Message, MessageHandler
from edge_sdk.mqtt.client_roles import AgentClient

log = logging.getLogger(__name__)

_STOP = "stop"


class AgentInbox:
    """Subscriptions of one MQTT client and the worker that runs their messages in order (see the module docstring)."""

    def __init__(self, client: AgentClient, *, name: str, max_chunk_bytes: int):
        self._client = client
        self._name = name
        self._max_chunk_bytes = max_chunk_bytes
        self._queue: queue.Queue[tuple[str, Callable[[], None] | None]] = queue.Queue()
        self._chunk_bytes = 0
        self._chunk_lock = threading.Lock()
        self._worker: threading.Thread | None = None
        self._remove_listener: Callable[[], None] | None = None
        self.handled = 0
        """Jobs the worker has run, failed ones included."""
        self._busy_since: float | None = None
        """When the job the worker runs now began (time.monotonic); None while it waits."""

    def start(self) -> None:
        self._worker = threading.Thread(target=self._work, name=self._name, daemon=True)
        self._worker.start()

    def stop(self, timeout: float) -> None:
        """Stop listening for connects and stop the worker once the jobs queued before this one have run."""
        if self._remove_listener is not None:
            self._remove_listener()
        self._queue.put((_STOP, None))
        if self._worker is not None:
            self._worker.join(timeout)

    def alive(self, hung_after_s: float) -> bool:
        """The worker runs and is not stuck: it waits for a job, or its current job began less than
        `hung_after_s` ago (the agent's systemd watchdog pings only while this holds)."""
        if self._worker is None or not self._worker.is_alive():
            return False
        busy_since = self._busy_since
        return busy_since is None or time.monotonic() - busy_since < hung_after_s

    def submit(self, kind: str, job: Callable[[], None]) -> None:
        """Run `job` on the worker after everything queued before it (`kind` names it in the log)."""
        self._queue.put((kind, job))

    def on_connected(self, job: Callable[[], None]) -> None:
        """Submit `job` on every (re)connect of the client."""

        def listener(event: ConnectionEvent) -> None:
            if event.state is ConnectionState.CONNECTED:
                self.submit("connected", job)

        self._remove_listener = self._client.add_listener(listener)

    def subscribe(self, topic_filter: str, kind: str, handler: Callable[[Message], None]) -> None:
        """Run `handler` on the worker for every message on `topic_filter`."""

        def receive(message: Message) -> None:
            self.submit(kind, lambda: handler(message))

        self._subscribe(topic_filter, receive)

    def subscribe_chunks(self, topic_filter: str, handler: Callable[[Message], None]) -> None:
        """Like `subscribe`, but a message is dropped while its bytes would pass the pending-chunk cap."""

        def receive(message: Message) -> None:
            size = len(message.payload)
            with self._chunk_lock:
                if self._chunk_bytes + size > self._max_chunk_bytes:
                    log.warning("dropped a chunk on %s: %d chunk bytes already wait", message.topic, self._chunk_bytes)
                    return
                self._chunk_bytes += size
            self.submit("chunk", lambda: self._run_chunk(handler, message))

        self._subscribe(topic_filter, receive)

    def _run_chunk(self, handler: Callable[[Message], None], message: Message) -> None:
        try:
            handler(message)
        finally:
            with self._chunk_lock:
                self._chunk_bytes -= len(message.payload)

    def _subscribe(self, topic_filter: str, handler: MessageHandler) -> None:
        """A broker that is slow or drops the link while the agent starts must not stop it: an unacknowledged
        subscription is kept and sent again on the next connect."""
        try:
            self._client.subscribe(topic_filter, handler, qos=1)
        except AckTimeoutError as exc:
            log.warning("%s; it is sent again when the connection comes back", exc)

    def _work(self) -> None:
        while True:
            kind, job = self._queue.get()
            if job is None:
                return
            self._busy_since = time.monotonic()
            try:
                job()
            except Exception:  # the agent outlives any one message
                log.exception("agent: handling a %s message failed", kind)
            finally:
                self._busy_since = None
                self.handled += 1
