"""Progress of long library steps (calibration, sensitivity, the mixed-precision search, engine builds),
reported to whoever listens; the library itself never prints.

A caller that wants to show progress wraps the work in `reporting_to(callback)`; the steps call
`report(...)` (or iterate through `track(...)`), which does nothing when nobody listens. A context
variable carries the listener, so the builders' signatures stay as they are and a listener set in one
thread never sees another thread's steps.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class ProgressUpdate:
    """One step of a task: `done` of `total` (None: not known in advance), and what it is on now."""

    task: str
    """What runs, in words: 'calibration', 'sensitivity', 'mixed precision', 'engine build'."""
    done: int
    total: int | None
    detail: str = ""
    finished: bool = False
    """The task ended (whether or not `done` reached `total`)."""


ProgressCallback = Callable[[ProgressUpdate], None]

_listener: contextvars.ContextVar[ProgressCallback | None] = contextvars.ContextVar("edge_sdk_progress", default=None)


@contextlib.contextmanager
def reporting_to(callback: ProgressCallback | None) -> Iterator[None]:
    """Send the progress of the steps run inside this block to `callback` (None: to nobody)."""
    token = _listener.set(callback)
    try:
        yield
    finally:
        _listener.reset(token)


def report(task: str, done: int, total: int | None, detail: str = "", *, finished: bool = False) -> None:
    """Tell the listener, if any, how far `task` got."""
    callback = _listener.get()
    if callback is not None:
        callback(ProgressUpdate(task, done, total, detail, finished))


def track(items: Iterable[T], task: str, total: int | None = None, detail: str = "") -> Iterator[T]:
    """Yield `items`, reporting one step after each, and the end when they run out or the loop stops."""
    done = 0
    report(task, 0, total, detail)
    try:
        for item in items:
            yield item
            done += 1
            report(task, done, total, detail)
    finally:
        report(task, done, total, detail, finished=True)


@contextlib.contextmanager
def step(task: str, detail: str = "") -> Iterator[None]:
    """A task of one step whose length is not known (a spinner): started here, finished when the block ends."""
    report(task, 0, None, detail)
    try:
        yield
    finally:
        report(task, 1, None, detail, finished=True)
