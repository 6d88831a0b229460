"""Progress bars on stderr for the library's long steps (edge_sdk.core.progress): one bar per task,
shown only when stderr is a terminal and the command prints for people (not under --json)."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from edge_sdk.core.progress import ProgressUpdate, reporting_to


class ProgressBars:
    """A ProgressCallback drawing each task as a rich bar (a spinner while its total is unknown)."""

    def __init__(self, progress: Progress):
        self._progress = progress
        self._tasks: dict[str, TaskID] = {}

    def __call__(self, update: ProgressUpdate) -> None:
        label = update.task + (f": {update.detail}" if update.detail else "")
        task = self._tasks.get(update.task)
        if task is None:
            task = self._progress.add_task(label, total=update.total)
            self._tasks[update.task] = task
        self._progress.update(task, completed=update.done, total=update.total, description=label)
        if update.finished:
            # a task that runs again (calibration of a second engine) starts a new bar
            self._progress.update(
                task, total=update.total or update.done or 1, completed=update.total or update.done or 1
            )
            self._progress.stop_task(task)
            del self._tasks[update.task]


@contextlib.contextmanager
def progress_bars(console: Console, enabled: bool = True) -> Iterator[None]:
    """Show the library's progress on `console` (stderr) while the block runs, if it is a terminal and
    `enabled`; otherwise nothing is shown and the block runs the same."""
    if not enabled or not console.is_terminal:
        yield
        return
    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )
    with _logs_above_the_bars(console), progress, reporting_to(ProgressBars(progress)):
        yield


class _ConsoleHandler(logging.Handler):
    """Writes log lines through the console that draws the bars, so they print above the bars."""

    def __init__(self, console: Console, like: logging.Handler):
        super().__init__(like.level)
        self.console = console
        self.setFormatter(like.formatter)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.console.print(self.format(record), markup=False, highlight=False, soft_wrap=True)
        except Exception:
            self.handleError(record)


@contextlib.contextmanager
def _logs_above_the_bars(console: Console) -> Iterator[None]:
    """While bars are drawn on stderr, the logging handlers that write to stderr write through the
    console instead: a line written past it would land inside a bar being redrawn."""
    root = logging.getLogger()
    stderr = (sys.stderr, sys.__stderr__)
    swapped = [h for h in root.handlers if isinstance(h, logging.StreamHandler) and h.stream in stderr]
    replacements = [_ConsoleHandler(console, handler) for handler in swapped]
    for old, new in zip(swapped, replacements, strict=True):
        root.removeHandler(old)
        root.addHandler(new)
    try:
        yield
    finally:
        for old, new in zip(swapped, replacements, strict=True):
            root.removeHandler(new)
            root.addHandler(old)
