"""Names of the runtime's shared-memory segments, and the clean-up of those left by dead runs.

Every segment a run creates is named `edgesdk-<creator pid>-<run token>-<role>`, so a later start
can tell which ones belong to a process that is gone and remove exactly those. The runtime creates
no other objects in /dev/shm (no POSIX semaphores: its locks are flock(2) locks on the segments).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from pathlib import Path

SEGMENT_PREFIX = "edgesdk"
SHM_DIR = Path("/dev/shm")
_NAME = re.compile(rf"^{SEGMENT_PREFIX}-(\d+)-[0-9a-f]+-[a-z0-9]+$")


def new_run_token() -> str:
    return secrets.token_hex(4)


def segment_name(token: str, role: str) -> str:
    """The name of one segment of this process's run `token`; `role` is e.g. `ring0` or `control`."""
    return f"{SEGMENT_PREFIX}-{os.getpid()}-{token}-{role}"


def remove_stale_segments(shm_dir: Path = SHM_DIR) -> list[str]:
    """Unlink segments whose creating process is gone (left by a crash or SIGKILL)."""
    removed = []
    for path in shm_dir.glob(f"{SEGMENT_PREFIX}-*"):
        match = _NAME.match(path.name)
        if match and not pid_alive(int(match.group(1))):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed.append(path.name)
    return removed


def segments_of(pid: int, shm_dir: Path = SHM_DIR) -> list[str]:
    """Names of segments created by `pid` that still exist."""
    return sorted(p.name for p in shm_dir.glob(f"{SEGMENT_PREFIX}-{pid}-*"))


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
