"""Bounded waits: poll a condition until it holds or a deadline passes."""

from __future__ import annotations

import time
from collections.abc import Callable

POLL_S = 0.02


def poll_until(condition: Callable[[], object], timeout: float, interval: float = POLL_S) -> bool:
    """Whether `condition()` became true within `timeout` seconds (checked every `interval`, and once more at the end)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return bool(condition())


def wait_until(condition: Callable[[], object], timeout: float, what: str, interval: float = POLL_S) -> None:
    """Wait until `condition()` is true; fail the test, naming `what`, if it is not within `timeout` seconds."""
    if not poll_until(condition, timeout, interval):
        raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
