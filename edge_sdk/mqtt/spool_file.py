"""The spool's file: one user at a time (a lock file), opening and checking it, moving a bad one aside.

Kept apart from `spool` (the queue operations) so that what happens to a damaged file reads in one place.
"""

from __future__ import annotations

import datetime
import fcntl
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from .errors import SpoolError

SCHEMA_VERSION = 1
SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    topic TEXT NOT NULL,
    payload BLOB NOT NULL,
    qos INTEGER NOT NULL,
    retain INTEGER NOT NULL,
    response_topic TEXT,
    correlation_data BLOB,
    size INTEGER NOT NULL,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO counters (name, value) VALUES ('evicted', 0);
"""
_CORRUPT = ("SQLITE_CORRUPT", "SQLITE_NOTADB")


class NotASpool(Exception):
    """The file opened as a database but is not a sound spool."""


@dataclass(frozen=True)
class SpoolCounts:
    messages: int
    bytes: int
    evicted: int


def lock_spool(path: Path) -> IO[bytes]:
    """Take `<path>.lock` for this process (released when the returned file is closed); SpoolError if taken."""
    lock_path = path.with_name(path.name + ".lock")
    try:
        handle = lock_path.open("a+b")
    except OSError as exc:
        raise SpoolError(f"MQTT spool {path}: cannot create its lock file {lock_path} ({exc.strerror})") from None
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        raise SpoolError(
            f"MQTT spool {path} is in use by another process (lock {lock_path}); give each client its own spool path"
        ) from None
    return handle


def open_spool_file(path: Path, durable: bool) -> tuple[sqlite3.Connection, SpoolCounts]:
    """Open (or create) the spool database in WAL mode and check it.

    Raises NotASpool for a foreign schema or a failed integrity check, sqlite3.DatabaseError for a file
    SQLite cannot read (see `is_corrupt`), SpoolError when the file system cannot hold it.
    """
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        db.execute("PRAGMA auto_vacuum=INCREMENTAL")  # only takes effect on a new file, before WAL mode
        if db.execute("PRAGMA journal_mode=WAL").fetchone()[0].lower() != "wal":
            raise SpoolError(f"MQTT spool {path}: the file system does not support SQLite's WAL mode")
        db.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
        if db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()[0] == 0:
            db.executescript(SCHEMA)
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version != SCHEMA_VERSION:
            raise NotASpool(f"expected spool schema version {SCHEMA_VERSION}, got {version}")
        check = [row[0] for row in db.execute("PRAGMA quick_check")]
        if check != ["ok"]:
            raise NotASpool(f"integrity check failed: {'; '.join(check[:3])}")
        count, size = db.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM messages").fetchone()
        evicted = db.execute("SELECT value FROM counters WHERE name = 'evicted'").fetchone()
    except BaseException:
        db.close()
        raise
    return db, SpoolCounts(messages=int(count), bytes=int(size), evicted=int(evicted[0]) if evicted else 0)


def is_corrupt(exc: sqlite3.DatabaseError) -> bool:
    """True when SQLite says the file is damaged or not a database (as opposed to locked, full, unreadable)."""
    name = getattr(exc, "sqlite_errorname", "")  # Python 3.11+
    if name:
        return any(name.startswith(code) for code in _CORRUPT)
    return not isinstance(exc, sqlite3.OperationalError)


def move_aside(path: Path) -> Path:
    """Rename the spool file (and its -wal/-shm companions) to `<name>.corrupt-<UTC time>`; returns the new path."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S")
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    serial = 1
    while target.exists():
        serial += 1
        target = path.with_name(f"{path.name}.corrupt-{stamp}-{serial}")
    try:
        for suffix in ("", "-wal", "-shm"):
            source = Path(f"{path}{suffix}")
            if source.exists():
                source.rename(Path(f"{target}{suffix}"))
    except OSError as exc:
        raise SpoolError(f"MQTT spool {path} is corrupt and cannot be moved aside ({exc.strerror})") from None
    return target
