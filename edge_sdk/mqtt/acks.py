"""Match broker acknowledgements (PUBACK/PUBCOMP, SUBACK) to the calls waiting for them, by message id.

paho hands out the message id only when publish()/subscribe() returns, and the acknowledgement can
arrive on paho's network thread before the caller gets to register for it. So an acknowledgement
is kept until its caller claims it, unless the caller said beforehand that it does not care; the
book never calls into paho, so it cannot deadlock against paho's own locks.
"""

from __future__ import annotations

import threading
import time
from typing import Generic, TypeVar

T = TypeVar("T")


class AckBook(Generic[T]):
    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._arrived: dict[int, T] = {}
        self._unwanted: dict[int, bool] = {}
        """mid -> whether the acknowledgement can be lost with the connection (QoS 0 packets are)."""

    def record(self, mid: int, value: T) -> None:
        """An acknowledgement arrived (network thread)."""
        with self._condition:
            if self._unwanted.pop(mid, None) is None:
                self._arrived[mid] = value
            self._condition.notify_all()

    def claim(self, mid: int, timeout: float, lost_with_connection: bool = False) -> T | None:
        """Wait for the acknowledgement of `mid`; None after `timeout` seconds (it is then unwanted)."""
        deadline = time.monotonic() + timeout
        with self._condition:
            while mid not in self._arrived:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self._unwanted[mid] = lost_with_connection
                    return None
                self._condition.wait(remaining)
            return self._arrived.pop(mid)

    def ignore(self, mid: int, lost_with_connection: bool = False) -> None:
        """Nobody will claim `mid`: drop its acknowledgement whether it came already or comes later."""
        with self._condition:
            if self._arrived.pop(mid, None) is None:
                self._unwanted[mid] = lost_with_connection

    def connection_lost(self) -> None:
        """Forget unwanted ids whose packets died with the connection (their acknowledgement never comes)."""
        with self._condition:
            self._unwanted = {mid: lost for mid, lost in self._unwanted.items() if not lost}

    def wait_until_settled(self, timeout: float) -> bool:
        """Wait until no acknowledgement that survives a reconnect is outstanding; False after `timeout` seconds."""
        with self._condition:
            return self._condition.wait_for(lambda: not any(not lost for lost in self._unwanted.values()), timeout)

    def __len__(self) -> int:
        with self._condition:
            return len(self._arrived) + len(self._unwanted)
