"""`DiskSpool`: messages waiting for the broker, kept on disk in publish order (SQLite in WAL mode).

Rows get increasing ids that are never reused (AUTOINCREMENT), so the order survives a restart of
the process. The spool is bounded by a message count and by payload bytes: appending beyond either
bound evicts the oldest rows first and counts them (`evicted`, kept in the file, so the count survives
restarts too). A row is removed only when the caller says it was delivered.

A file that is not a sound spool (not a database, damaged pages, a foreign schema) is moved aside
as `<name>.corrupt-<UTC time>` (never deleted), logged as an error, and a fresh spool takes its
place; `quarantined` says where the old file went. One process at a time: a lock file beside the
spool refuses a second user with `SpoolError`.

Thread-safe: one connection, one lock. Never calls out of this module while holding it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from .errors import SpoolError, SpoolFullError
from .spool_file import NotASpool, SpoolCounts, is_corrupt, lock_spool, move_aside, open_spool_file

log = logging.getLogger(__name__)
T = TypeVar("T")

_COLUMNS = "id, topic, payload, qos, retain, response_topic, correlation_data, created"


@dataclass(frozen=True)
class SpooledMessage:
    """One message as the spool keeps it; `id` is 0 until it is stored."""

    topic: str
    payload: bytes
    qos: int
    retain: bool = False
    response_topic: str | None = None
    correlation_data: bytes | None = None
    id: int = 0
    created: float = 0.0

    @property
    def size(self) -> int:
        """What counts against max_bytes: topic, payload and properties, in bytes."""
        extra = len(self.response_topic or "") + len(self.correlation_data or b"")
        return len(self.topic.encode("utf-8")) + len(self.payload) + extra


@dataclass(frozen=True)
class SpoolStats:
    path: Path
    messages: int
    """Messages waiting in the spool (including those sent but not yet acknowledged)."""
    bytes: int
    """Their size as counted against max_bytes (topic + payload + properties)."""
    evicted: int
    """Messages dropped, oldest first, to stay within the bounds; kept across restarts."""
    file_bytes: int
    """The spool's footprint on disk: the database file and its write-ahead log."""
    quarantined: Path | None
    """Where a corrupt spool file found at open was moved, if one was."""


class DiskSpool:
    def __init__(self, path: Path, max_messages: int = 100_000, max_bytes: int = 64 * 2**20, durable: bool = False):
        if max_messages < 1 or max_bytes < 1:
            raise ValueError(f"expected max_messages >= 1 and max_bytes >= 1, got {max_messages} and {max_bytes}")
        self.path = Path(path).expanduser()
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.durable = durable
        self.quarantined: Path | None = None
        self._lock = threading.Lock()
        self._count = 0
        self._bytes = 0
        self._evicted = 0
        self._evicting = False
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SpoolError(f"MQTT spool: cannot create the folder of {self.path} ({exc.strerror})") from None
        self._lock_file = lock_spool(self.path)
        try:
            self._db = self._open_or_replace()
        except BaseException:
            self._lock_file.close()
            raise

    # --- reading and writing -----------------------------------------------------------------------

    @property
    def evicted(self) -> int:
        with self._lock:
            return self._evicted

    def __len__(self) -> int:
        with self._lock:
            return self._count

    def append(self, message: SpooledMessage) -> int:
        """Store `message` after all others (evicting the oldest to stay within bounds); returns its id.

        Raises SpoolFullError when the message alone exceeds max_bytes or the disk is full.
        """
        size = message.size
        if size > self.max_bytes:
            raise SpoolFullError(
                f"MQTT spool {self.path}: a {size}-byte message to {message.topic!r} exceeds max_bytes {self.max_bytes}"
            )
        with self._lock:
            return self._guarded(lambda: self._append(message, size), f"append a message to {message.topic!r}")

    def read_after(self, after_id: int, limit: int) -> list[SpooledMessage]:
        """Up to `limit` messages with ids above `after_id`, oldest first."""
        with self._lock:
            rows = self._guarded(
                lambda: self._db.execute(
                    f"SELECT {_COLUMNS} FROM messages WHERE id > ? ORDER BY id LIMIT ?", (after_id, limit)
                ).fetchall(),
                "read messages",
            )
        return [
            SpooledMessage(
                id=row[0],
                topic=row[1],
                payload=bytes(row[2]),
                qos=row[3],
                retain=bool(row[4]),
                response_topic=row[5],
                correlation_data=None if row[6] is None else bytes(row[6]),
                created=row[7],
            )
            for row in rows
        ]

    def remove(self, ids: Iterable[int]) -> None:
        """Forget delivered messages (ids no longer present are ignored)."""
        unique = sorted(set(ids))
        if not unique:
            return
        with self._lock:
            self._guarded(lambda: self._remove(unique), "remove delivered messages")

    def stats(self) -> SpoolStats:
        with self._lock:
            messages, size, evicted = self._count, self._bytes, self._evicted
        file_bytes = 0
        for suffix in ("", "-wal"):
            with contextlib.suppress(OSError):
                file_bytes += os.stat(f"{self.path}{suffix}").st_size
        return SpoolStats(self.path, messages, size, evicted, file_bytes, self.quarantined)

    def close(self) -> None:
        with self._lock:
            with contextlib.suppress(sqlite3.Error):
                self._db.close()
            self._lock_file.close()

    def __enter__(self) -> DiskSpool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- inside the lock ---------------------------------------------------------------------------

    def _append(self, message: SpooledMessage, size: int) -> int:
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            evicted = self._evict(extra_count=1, extra_bytes=size)
            cursor = db.execute(
                "INSERT INTO messages (topic, payload, qos, retain, response_topic, correlation_data, size, created) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    message.topic,
                    message.payload,
                    message.qos,
                    int(message.retain),
                    message.response_topic,
                    message.correlation_data,
                    size,
                    time.time(),
                ),
            )
            db.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            raise
        row_id = int(cursor.lastrowid or 0)
        self._count += 1 - evicted[0]
        self._bytes += size - evicted[1]
        self._evicted += evicted[0]
        if evicted[0] and not self._evicting:
            log.warning(
                "MQTT spool %s is full (%d messages, %d bytes max): evicting the oldest; %d evicted so far",
                self.path,
                self.max_messages,
                self.max_bytes,
                self._evicted,
            )
        self._evicting = bool(evicted[0])
        return row_id

    def _evict(self, extra_count: int, extra_bytes: int) -> tuple[int, int]:
        """Delete the oldest rows so that `extra_*` more fit; returns (rows, bytes) deleted (in the transaction)."""
        need_count = self._count + extra_count - self.max_messages
        need_bytes = self._bytes + extra_bytes - self.max_bytes
        if need_count <= 0 and need_bytes <= 0:
            return 0, 0
        rows = freed = 0
        last = 0
        while rows < need_count or freed < need_bytes:
            chunk = self._db.execute(
                "SELECT id, size FROM messages WHERE id > ? ORDER BY id LIMIT ?", (last, max(need_count - rows, 256))
            ).fetchall()
            if not chunk:
                break
            for row_id, size in chunk:
                rows, freed, last = rows + 1, freed + size, row_id
                if rows >= need_count and freed >= need_bytes:
                    break
        if not rows:
            return 0, 0
        self._db.execute("DELETE FROM messages WHERE id <= ?", (last,))
        self._db.execute("UPDATE counters SET value = value + ? WHERE name = 'evicted'", (rows,))
        return rows, freed

    def _remove(self, ids: list[int]) -> None:
        db = self._db
        removed = size = 0
        db.execute("BEGIN IMMEDIATE")
        try:
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                marks = ",".join("?" * len(chunk))
                found, found_size = db.execute(
                    f"SELECT COUNT(*), COALESCE(SUM(size), 0) FROM messages WHERE id IN ({marks})", chunk
                ).fetchone()
                db.execute(f"DELETE FROM messages WHERE id IN ({marks})", chunk)
                removed, size = removed + found, size + found_size
            db.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            raise
        self._count -= removed
        self._bytes -= size
        if not self._count:  # give the space back once everything is delivered
            db.executescript("PRAGMA incremental_vacuum;")  # executescript steps it to the end
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def _guarded(self, operation: Callable[[], T], what: str) -> T:
        """Run `operation`; a corrupt file found on the way is replaced and the operation retried once."""
        try:
            return operation()
        except sqlite3.DatabaseError as exc:
            if not is_corrupt(exc):
                full = getattr(exc, "sqlite_errorname", "") == "SQLITE_FULL"
                error = SpoolFullError if full else SpoolError
                raise error(f"MQTT spool {self.path}: cannot {what}: {exc}") from None
            with contextlib.suppress(sqlite3.Error):
                self._db.close()
            self._quarantine(str(exc))
            self._db = self._fresh()
            return operation()

    # --- opening -----------------------------------------------------------------------------------

    def _open_or_replace(self) -> sqlite3.Connection:
        try:
            return self._adopt(open_spool_file(self.path, self.durable))
        except NotASpool as exc:
            self._quarantine(str(exc))
        except sqlite3.DatabaseError as exc:
            if not is_corrupt(exc):
                raise SpoolError(f"MQTT spool {self.path}: cannot open: {exc}") from None
            self._quarantine(str(exc))
        return self._fresh()

    def _fresh(self) -> sqlite3.Connection:
        try:
            return self._adopt(open_spool_file(self.path, self.durable))
        except (sqlite3.DatabaseError, NotASpool) as exc:
            raise SpoolError(f"MQTT spool {self.path}: cannot create a fresh spool: {exc}") from None

    def _adopt(self, opened: tuple[sqlite3.Connection, SpoolCounts]) -> sqlite3.Connection:
        db, counts = opened
        self._count, self._bytes, self._evicted = counts.messages, counts.bytes, counts.evicted
        if self._count:
            log.info("MQTT spool %s holds %d messages (%d bytes) from before", self.path, self._count, self._bytes)
        return db

    def _quarantine(self, why: str) -> None:
        self.quarantined = move_aside(self.path)
        log.error(
            "MQTT spool %s is corrupt (%s): moved it aside to %s and started a fresh spool; "
            "the messages in it are not replayed",
            self.path,
            why,
            self.quarantined,
        )
