"""The connection as an explicit state machine that callers can read, wait on and listen to."""

from __future__ import annotations

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
