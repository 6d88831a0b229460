"""The `edge-sdk` console script. Loading the CLI and a command's module (click, rich, numpy, ONNX
Runtime) takes up to a second; a Ctrl-C or SIGTERM in that time ends it with one line and 128 + the
signal, not an import traceback. The guard stays until the CLI releases it: once the command's module
is loaded, or, for a command that handles stop signals itself (`run`), when it installs its handlers."""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType
from typing import Any

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_before_guard: dict[int, Any] = {}


def main() -> None:
    _before_guard.update({sig: signal.signal(sig, _stopped_while_loading) for sig in _STOP_SIGNALS})
    from edge_sdk.cli.main import main as run_cli

    run_cli()


def release_startup_guard() -> None:
    """Put back the stop-signal handlers from before the guard (a no-op when the guard is not in place)."""
    while _before_guard:
        sig, handler = _before_guard.popitem()
        signal.signal(sig, handler)


def _stopped_while_loading(signum: int, _frame: FrameType | None) -> None:
    sys.stderr.write(f"stopped during start-up ({signal.Signals(signum).name})\n")
    sys.stderr.flush()
    # Nothing exists yet to clean up, and an exception raised here inside a C extension's import
    # would come out as that extension's ImportError traceback instead.
    os._exit(128 + signum)
