"""How stage processes start: forked from multiprocessing's fork server, which imported the stages'
modules once, so a stage starts in milliseconds instead of a fresh interpreter importing the SDK (and,
under `edge-sdk run`, the whole CLI that is the main module) again; spawn where there is no fork server.

A stage forked this way is the server's child, not the runtime's: it watches the runtime through the
pipe multiprocessing keeps to it (`multiprocessing.parent_process()`), and dies when that closes. It
also takes the runtime's environment as it is when the stage starts (`StageChannels.environment`), as a
spawned stage would, rather than the server's from when the server started; libraries that read a
variable only when they are imported (the preloaded ones) keep the value of the first start.

The server's own imports take about half a second here. `edge-sdk run` starts it first thing
(`start_stage_server`), so they overlap the CLI's start-up and the engine's loading; otherwise the
runtime's first stage starts it.

This module stays light (the standard library only): the console script imports it before anything else."""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import signal
from collections.abc import Iterator
from multiprocessing.context import ForkServerContext, SpawnContext

STAGE_MODULES = (
    "edge_sdk.pipeline.stages.capture",
    "edge_sdk.pipeline.stages.inference",
    "edge_sdk.pipeline.stages.output",
    "onnxruntime",
)
"""What the fork server imports before it forks any stage (one it cannot import is skipped). Not cv2:
OpenCV reads its log levels from the environment when it is imported, which core/opencv.py sets first
in the process that imports it."""


def stage_context() -> ForkServerContext | SpawnContext:
    """The multiprocessing context the runtime starts its stages with."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(STAGE_MODULES))
    return context


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def start_stage_server() -> None:
    """Start the fork server now, in the background, so its imports overlap the caller's work; a
    no-op where stages are spawned, or once it runs."""
    if isinstance(stage_context(), ForkServerContext):
        # The fork server starts the resource tracker first if it is not running, and starting the
        # tracker unblocks SIGINT/SIGTERM on its way out (multiprocessing/resource_tracker.py): the
        # server would then inherit them unblocked, and a SIGTERM to the process group would kill it,
        # and its stages with it (PR_SET_PDEATHSIG).
        multiprocessing.resource_tracker.ensure_running()
        with started_without_stop_signals():
            multiprocessing.forkserver.ensure_running()


@contextlib.contextmanager
def started_without_stop_signals() -> Iterator[None]:
    """Block SIGINT/SIGTERM in this thread while a child (a stage, or the fork server) is started, so
    it inherits them blocked and a Ctrl-C during its imports cannot print a traceback there; a stage
    unblocks them once it ignores them (stages/common.py's `child_setup`), and the caller's handlers
    run as soon as they are unblocked here."""
    blocked_before = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked_before)
