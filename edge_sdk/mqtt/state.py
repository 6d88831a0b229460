"""The connection as an explicit state machine that callers can read, wait on and listen to."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum


class ConnectionState(str, Enum):
    IDLE = "idle"
    """Created, never asked to connect."""
    CONNECTING = "connecting"
    """First connection attempt(s) in progress."""
    CONNECTED = "connected"
    """The broker accepted CONNECT; publishes go out now."""
    RECONNECTING = "reconnecting"
    """The connection was lost; paho retries with the reconnect policy. QoS>0 publishes queue meanwhile."""
    CLOSED = "closed"
    """disconnect() was called, or connect() failed for good."""


@dataclass(frozen=True)
class ConnectionEvent:
    """One change of state, with the broker's reason when there was one."""

    state: ConnectionState
    previous: ConnectionState
    reason_code: int | None = None
    reason: str = ""
    timestamp: float = field(default_factory=time.time)


ConnectionListener = Callable[[ConnectionEvent], None]


class StateMachine:
    """The current `ConnectionState`, thread-safe: read it, wait for one, be told of every change.

    Listeners run on the thread that changed the state (paho's network thread, mostly), outside the lock.
    """

    def __init__(self, log: logging.Logger) -> None:
        self._log = log
        self._changed = threading.Condition()
        self._state = ConnectionState.IDLE
        self._listeners: list[ConnectionListener] = []

    @property
    def state(self) -> ConnectionState:
        with self._changed:
            return self._state

    def add_listener(self, listener: ConnectionListener) -> Callable[[], None]:
        with self._changed:
            self._listeners.append(listener)

        def remove() -> None:
            with self._changed:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return remove

    def wait_for(self, state: ConnectionState, timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: self._state is state, timeout)

    def set(self, state: ConnectionState, reason_code: int | None = None, reason: str = "") -> None:
        with self._changed:
            previous = self._state
            if previous is state:
                return
            self._state = state
            self._changed.notify_all()
            listeners = list(self._listeners)
        event = ConnectionEvent(state=state, previous=previous, reason_code=reason_code, reason=reason)
        for listener in listeners:
            try:
                listener(event)
            except Exception:  # a listener's bug must not kill paho's network thread
                self._log.exception("MQTT connection listener %r failed on %s", listener, event)
