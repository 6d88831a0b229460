"""Progress bars on stderr for the library's long steps (edge_sdk.core.progress): one bar per task,
shown only when stderr is a terminal and the command prints for people (not under --json)."""

from __future__ import annotations

import contextlib
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
    with progress, reporting_to(ProgressBars(progress)):
        yield
