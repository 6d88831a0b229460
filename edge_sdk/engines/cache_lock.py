"""The lock one engine key is built under: a `.DIGEST.lock` file that exists only while someone holds it.

An flock on a file that is never removed would leave one empty file per key ever built (and per failed
build). This lock removes its file when it is released, and stays safe for the processes waiting on it:

- the file is removed only by the holder, before it lets go of the lock;
- a waiter that gets the lock on a file that was removed meanwhile (the path is gone, or names a newer
  file) lets go and locks the file now at the path, so every holder holds the same file as the others.

So two processes can never both believe they hold the lock of one key, and "concurrent builders of one
key build it once" holds as with a lock file that stays. A holder killed with SIGKILL leaves its file
behind (the kernel drops the flock, not the file); the next holder of that key, or `edge-sdk cache rm`,
removes it.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from types import TracebackType

from edge_sdk.core.errors import EngineCacheError

_OPEN_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


class KeyLock:
    """Exclusive lock on `path` across processes; `with KeyLock(path) as held:` (held is False only when
    `wait=False` and another process holds it). The file is removed on release."""

    def __init__(self, path: Path, *, wait: bool = True) -> None:
        self.path = path
        self.wait = wait
        self._fd: int | None = None

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.release()

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> bool:
        """Take the lock (waiting for it unless `wait=False`); True when this process now holds it."""
        if self._fd is not None:
            raise RuntimeError(f"{self.path} is already held by this KeyLock")
        while True:
            fd = self._open()
            try:
                if not self._lock(fd):
                    os.close(fd)
                    return False
                if self._is_current(fd):
                    self._fd = fd
                    return True
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)  # the holder we waited for removed this file: lock the one now at the path

    def release(self) -> None:
        """Remove the lock file, then let go of the lock; a no-op when not held."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            self.path.unlink(missing_ok=True)  # still holding it: a waiter on this file will see it gone
        finally:
            os.close(fd)

    def _open(self) -> int:
        try:
            return os.open(self.path, _OPEN_FLAGS, 0o644)
        except OSError as exc:
            raise EngineCacheError(f"cannot take the build lock {self.path} ({exc.strerror or exc})") from None

    def _lock(self, fd: int) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if self.wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def _is_current(self, fd: int) -> bool:
        try:
            at_path = os.stat(self.path, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return os.path.samestat(at_path, os.fstat(fd))
