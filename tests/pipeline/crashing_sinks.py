"""Callable sinks that kill the output stage's process, to exercise the watchdog."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from edge_sdk.core.results import Result

CRASH_MARKER_ENV = "EDGE_SDK_TEST_CRASH_MARKER"


def crash_once_at_frame_5(result: Result, image: np.ndarray) -> None:
    """Exit hard the first time frame 5 arrives (a marker file remembers that it happened)."""
    marker = Path(os.environ[CRASH_MARKER_ENV])
    if result.frame.index == 5 and not marker.exists():
        marker.write_text("crashed")
        os._exit(17)


def crash_always(result: Result, image: np.ndarray) -> None:
    os._exit(3)


def sleep_30ms(result: Result, image: np.ndarray) -> None:
    """A slow consumer."""
    import time

    time.sleep(0.03)
