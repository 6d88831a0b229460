"""A lock between processes that the kernel releases when its holder dies.

A multiprocessing.Lock is a POSIX semaphore: a process SIGKILLed while holding it leaves it held
forever, and every other stage then waits on it. `flock(2)` locks belong to an open file and the
kernel drops them when the last descriptor closes, which includes the holder's death. Each process
opens the file itself (descriptors are not shared), so every process has its own lock to take; a
thread lock on top makes the lock exclusive between threads of one process too.
"""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path
from types import TracebackType


class ProcessLock:
    """Exclusive lock on `path` (an existing file, e.g. a shared-memory segment in /dev/shm)."""

    def __init__(self, path: Path):
        self.path = path
        self._fd: int | None = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self._threads = threading.Lock()

    def __enter__(self) -> ProcessLock:
        self._threads.acquire()
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX)  # type: ignore[arg-type]
        except BaseException:
            self._threads.release()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        try:
            fcntl.flock(self._fd, fcntl.LOCK_UN)  # type: ignore[arg-type]
        finally:
            self._threads.release()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
