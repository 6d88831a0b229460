"""The `edge-sdk` console script. Loading the CLI (click, rich, numpy, ONNX) takes about a second; a
Ctrl-C or SIGTERM in that second ends it with one line and 128 + the signal, not an import traceback."""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def main() -> None:
    previous = {sig: signal.signal(sig, _stopped_while_loading) for sig in _STOP_SIGNALS}
    from edge_sdk.cli.main import main as run_cli

    for sig, handler in previous.items():
        signal.signal(sig, handler)
    run_cli()


def _stopped_while_loading(signum: int, _frame: FrameType | None) -> None:
    sys.stderr.write(f"stopped during start-up ({signal.Signals(signum).name})\n")
    sys.stderr.flush()
    # Nothing exists yet to clean up, and an exception raised here inside a C extension's import
    # would come out as that extension's ImportError traceback instead.
    os._exit(128 + signum)
