"""What every stage process shares: ring handles, the run's links, a reporter, child set-up."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from typing import Any

from edge_sdk.core.errors import EdgeSDKError
from edge_sdk.sources.spec import BufferPolicy

from ..control import ControlHandle, RunControl
from ..frame_ring import FrameRing, RingLayout
from ..message_socket import MessageSender
from ..messages import StageFailure, StageReport

POLL_SECONDS = 0.05
IDLE_SECONDS = 0.002
"""How long a stage with nothing to do sleeps before it looks at the rings again."""
GAVE_UP_EXIT = 86
"""Exit code of a stage that failed for a reason a restart cannot fix (its StageFailure says why)."""
CRASHED_EXIT = 1
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_PR_SET_NAME = 15
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class RingHandle:
    """What a child needs to attach to one source's ring."""

    name: str
    layout: RingLayout
    policy: BufferPolicy
    live: bool = False
    """A live source's ring (the wait in it counts as latency), not a file's that is read ahead."""


@dataclass(frozen=True)
class StageChannels:
    """How a stage reaches the rest of the run. No lock, queue or event is shared: a stage that
    dies cannot leave anything held that the others wait on."""

    control: ControlHandle
    """Flags the runtime sets: stop, captures_done (workers drain and exit), workers_done (output drains)."""
    results_address: str
    """Inference -> output: one InferenceDone per frame (a socket the runtime keeps listening)."""
    reports_address: str
    """Every stage -> runtime: StageReport, StatusEvent and StageFailure."""
    environment: dict[str, str] = field(default_factory=dict)
    """The runtime's environment when the run started, which a stage forked by the fork server takes."""
    log_level: int = logging.INFO
    """The runtime's `edge_sdk` log level (DEBUG under `edge-sdk --debug`), which the stage takes: its
    own debug lines, and the libraries' logs that follow it (ONNX Runtime's, OpenCV's, FFmpeg's)."""


class StageLink:
    """A stage process's end of the run: its flags, its report connection, the parent check."""

    def __init__(self, channels: StageChannels, kind: str):
        if channels.environment:
            os.environ.clear()
            os.environ.update(channels.environment)
        logging.getLogger("edge_sdk").setLevel(channels.log_level)
        self._runtime = child_setup(kind)
        self.control = RunControl.attach(channels.control)
        self._reports = MessageSender(channels.reports_address, give_up=lambda: not self.parent_alive())
        self._stop_seen: float | None = None

    def parent_alive(self) -> bool:
        return self._runtime.is_alive()

    def running(self) -> bool:
        """Neither stopped by the runtime nor orphaned."""
        return self.parent_alive() and not self.control.stop.is_set()

    def seconds_since_stop(self) -> float | None:
        """How long ago this stage first saw the stop flag (None while it is not set)."""
        if self._stop_seen is None and self.control.stop.is_set():
            self._stop_seen = time.monotonic()
        return None if self._stop_seen is None else time.monotonic() - self._stop_seen

    def report(self, item: Any) -> None:
        self._reports.send(item)

    def close(self) -> None:
        self._reports.close()
        self.control.close()


class Reporter:
    """Counts a stage's work and sends a StageReport every `every` seconds."""

    def __init__(self, stage: str, link: StageLink, every: float, extra: Callable[[], dict[str, Any]] = dict):
        self.stage, self.link, self.every = stage, link, every
        self.extra = extra
        """Called only when a report goes out, so stage-specific counters cost nothing per frame."""
        self.frames = 0
        self.dropped = 0
        self.busy = 0.0
        self.latencies: list[float] = []
        self._next = time.monotonic()
        """The first tick reports at once: the stage's loop runs, so the runtime counts it as started."""

    def tick(self, force: bool = False) -> None:
        if force or time.monotonic() >= self._next:
            report = StageReport(
                self.stage, os.getpid(), self.frames, self.busy, self.dropped, self.latencies, self.extra()
            )
            self.link.report(report)
            self.latencies = []
            self._next = time.monotonic() + self.every


def child_setup(kind: str) -> BaseProcess:
    """Stop signals are the runtime's to handle: a stage ignores them (Ctrl-C reaches the whole
    process group) and is stopped through its flags, or killed. A stage dies with the runtime, and
    is named `edgesdk-<kind>` in ps and top (/proc/PID/comm). Returns the runtime's process."""
    runtime = multiprocessing.parent_process()
    if runtime is None:
        raise RuntimeError("a stage runs in a process that the pipeline runtime started")
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # blocked by the runtime while it started us
    _log_warnings_to_stderr()
    if sys.platform == "linux":
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # the parent: the runtime, or the fork server
        libc.prctl(_PR_SET_NAME, f"edgesdk-{kind}".encode()[:15], 0, 0, 0)
    threading.Thread(target=_die_with, args=(runtime,), name="edgesdk-runtime-watch", daemon=True).start()
    if not runtime.is_alive():  # the runtime died before the watch began
        os._exit(CRASHED_EXIT)
    return runtime


def _die_with(runtime: BaseProcess) -> None:
    """SIGKILL this stage once the runtime's end of its pipe closes (the runtime exited or was killed).
    A stage the fork server forked cannot leave it to PR_SET_PDEATHSIG, which watches the server: the
    server lives on while any stage it forked does."""
    multiprocessing.connection.wait([runtime.sentinel])
    os.kill(os.getpid(), signal.SIGKILL)


class _LevelPrefix(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"{record.levelname.lower()}: {record.getMessage()}"


def _log_warnings_to_stderr() -> None:
    """A stage's warnings and errors on stderr in the CLI's form (`error: sink ... failed`), where a
    started process would print them bare (Python's last-resort handler); one the parent's logging
    reached (a forked stage) keeps it."""
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(_LevelPrefix())
        root.addHandler(handler)
        root.setLevel(logging.WARNING)


@contextlib.contextmanager
def failures_reported(link: StageLink, stage: str) -> Iterator[None]:
    """Turn a stage's exception into one StageFailure for the runtime and an exit code: an SDK
    error (a dead source, an engine that cannot load) is final, anything else is a crash the
    runtime may restart."""
    try:
        yield
    except EdgeSDKError as error:
        link.report(StageFailure(stage, str(error), final=True))
        raise SystemExit(GAVE_UP_EXIT) from None
    except Exception as error:
        link.report(
            StageFailure(stage, f"{type(error).__name__}: {error}", final=False, details=traceback.format_exc())
        )
        raise SystemExit(CRASHED_EXIT) from None


def attach_rings(handles: tuple[RingHandle, ...]) -> list[FrameRing]:
    return [FrameRing.attach(h.name, h.layout) for h in handles]
