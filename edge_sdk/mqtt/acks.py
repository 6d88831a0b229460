"""Match broker acknowledgements (PUBACK/PUBCOMP, SUBACK) to the calls waiting for them, by message id.

paho hands out the message id only when publish()/subscribe() returns, and the acknowledgement can
arrive on paho's network thread before the caller gets to register for it. So an acknowledgement
is kept until its caller claims it, unless the caller said beforehand that it does not care; the
book never calls into paho, so it cannot deadlock against paho's own locks.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import Generic, TypeVar

T = TypeVar("T")


class AckBook(Generic[T]):
    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._arrived: dict[int, T] = {}
        self._unwanted: dict[int, bool] = {}
        """mid -> whether the acknowledgement can be lost with the connection (QoS 0 packets are)."""
        self._claiming: dict[int, bool] = {}
        """mids a caller is waiting for right now (same meaning of the flag)."""

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
            self._claiming[mid] = lost_with_connection
            try:
                while mid not in self._arrived:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        self._unwanted[mid] = lost_with_connection
                        return None
                    self._condition.wait(remaining)
                return self._arrived.pop(mid)
            finally:
                del self._claiming[mid]

    def collect(self, mids: Iterable[int], timeout: float) -> dict[int, T]:
        """Take the acknowledgements of those `mids` that arrived, waiting up to `timeout` s for at least one."""
        wanted = list(mids)
        deadline = time.monotonic() + timeout
        with self._condition:
            while True:
                found = {mid: self._arrived.pop(mid) for mid in wanted if mid in self._arrived}
                remaining = deadline - time.monotonic()
                if found or not wanted or remaining <= 0:
                    return found
                self._condition.wait(remaining)

    def ignore(self, mid: int, lost_with_connection: bool = False) -> None:
        """Nobody will claim `mid`: drop its acknowledgement whether it came already or comes later."""
        with self._condition:
            if self._arrived.pop(mid, None) is None:
                self._unwanted[mid] = lost_with_connection

    def connection_lost(self) -> None:
        """Forget unwanted ids whose packets died with the connection (their acknowledgement never comes)."""
        with self._condition:
            self._unwanted = {mid: lost for mid, lost in self._unwanted.items() if not lost}

    def reset(self) -> None:
        """A new paho client starts numbering from 1 again: forget everything about the old one's ids."""
        with self._condition:
            self._arrived.clear()
            self._unwanted.clear()
            self._condition.notify_all()

    def wait_until_settled(self, timeout: float) -> bool:
        """Wait until no acknowledgement that survives a reconnect is outstanding; False after `timeout` seconds.

        Outstanding: ids nobody waits for (ignored or timed out) and ids a caller is waiting for right now.
        """

        def settled() -> bool:
            return not any(not lost for lost in self._unwanted.values()) and all(self._claiming.values())

        with self._condition:
            return self._condition.wait_for(settled, timeout)

    def __len__(self) -> int:
        with self._condition:
            return len(self._arrived) + len(self._unwanted)
