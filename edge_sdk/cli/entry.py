"""The `edge-sdk` console script. Loading the CLI and a command's module (click, rich, numpy, ONNX
Runtime) takes up to a second; a Ctrl-C or SIGTERM in that time ends it with one line and 128 + the
signal, not an import traceback. The guard stays until the CLI releases it: once the command's module
is loaded, or, for a command that handles stop signals itself (`run`), when it installs its handlers.

For the commands that run pipelines, the stages' fork server is started before the CLI is imported,
so its own imports (about half a second) overlap the CLI's and the engine's loading; an inline run
leaves it idle, and it exits with this process."""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType
from typing import Any

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_before_guard: dict[int, Any] = {}
_PIPELINE_COMMANDS = frozenset({"run", "detect"})
_OPTIONS_WITH_A_VALUE = frozenset({"--profile-dir", "--cache-dir"})
"""The CLI group's options that take a value, to find the command's name in argv before click parses it."""


def main() -> None:
    _before_guard.update({sig: signal.signal(sig, _stopped_while_loading) for sig in _STOP_SIGNALS})
    if _command_name(sys.argv[1:]) in _PIPELINE_COMMANDS:
        from edge_sdk.pipeline.stage_start import start_stage_server

        start_stage_server()
    from edge_sdk.cli.main import main as run_cli

    run_cli()


def release_startup_guard() -> None:
    """Put back the stop-signal handlers from before the guard (a no-op when the guard is not in place)."""
    while _before_guard:
        sig, handler = _before_guard.popitem()
        signal.signal(sig, handler)


def _command_name(args: list[str]) -> str | None:
    words = iter(args)
    for word in words:
        if word in _OPTIONS_WITH_A_VALUE:
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


def _stopped_while_loading(signum: int, _frame: FrameType | None) -> None:
    sys.stderr.write(f"stopped during start-up ({signal.Signals(signum).name})\n")
    sys.stderr.flush()
    # Nothing exists yet to clean up, and an exception raised here inside a C extension's import
    # would come out as that extension's ImportError traceback instead.
    os._exit(128 + signum)
