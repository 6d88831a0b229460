"""The operator's record of enrollment requests, one row per serial (SQLite, shared by `fleet enroll serve`
and `fleet enroll list|approve|reject|revoke`)."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edge_sdk.core.errors import ConfigError
from edge_sdk.fleet.wire.protocol import utc_now

STATES = ("pending", "approved", "enrolled", "rejected", "revoked")


@dataclass(frozen=True)
class EnrollmentRecord:
    serial: str
    state: str
    device_id: str | None
    claim: str | None
    request_id: str | None
    re_enroll: bool
    facts: dict[str, Any]
    reason: str | None
    updated_at: str


class EnrollmentStore:
    """One row per serial: its state, the latest request (CSR, ids) and the certificate issued. SQLite, so
    the serving process and the `list|approve|reject|revoke` commands can share it."""

    def __init__(self, state_dir: Path):
        state_dir.mkdir(parents=True, exist_ok=True)
        self.path = state_dir / "enrollment.db"
        self._lock = threading.Lock()
        with self._connect() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS serials (serial TEXT PRIMARY KEY, state TEXT NOT NULL DEFAULT 'pending', device_id TEXT, "
                "claim TEXT, request_id TEXT, nonce TEXT, csr_pem TEXT, facts TEXT NOT NULL DEFAULT '{}', "
                "certificate_pem TEXT, re_enroll INTEGER NOT NULL DEFAULT 0, reason TEXT, "
                "answered INTEGER NOT NULL DEFAULT 0, updated_at TEXT NOT NULL)"
            )

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            db = sqlite3.connect(self.path, timeout=30)
            try:
                with db:
                    yield db
            finally:
                db.close()

    def get(self, serial: str) -> dict[str, Any] | None:
        with self._connect() as db:
            db.row_factory = sqlite3.Row
            row = db.execute("SELECT * FROM serials WHERE serial = ?", (serial,)).fetchone()
        return None if row is None else dict(row)

    def records(self) -> list[EnrollmentRecord]:
        with self._connect() as db:
            db.row_factory = sqlite3.Row
            rows = db.execute("SELECT * FROM serials ORDER BY serial").fetchall()
        return [
            EnrollmentRecord(
                serial=row["serial"],
                state=row["state"],
                device_id=row["device_id"],
                claim=row["claim"],
                request_id=row["request_id"],
                re_enroll=bool(row["re_enroll"]),
                facts=json.loads(row["facts"]),
                reason=row["reason"],
                updated_at=row["updated_at"],
            )
            for row in rows
        ]

    def upsert(self, serial: str, **values: Any) -> None:
        values["updated_at"] = utc_now().isoformat()
        columns = ", ".join(values)
        marks = ", ".join("?" for _ in values)
        updates = ", ".join(f"{name} = excluded.{name}" for name in values)
        with self._connect() as db:
            db.execute(
                f"INSERT INTO serials (serial, {columns}) VALUES (?, {marks}) "
                f"ON CONFLICT(serial) DO UPDATE SET {updates}",
                (serial, *values.values()),
            )

    def approve(self, serial: str, re_enroll: bool = False) -> str:
        row = self.get(serial)
        if row is None:
            if not re_enroll:
                raise ConfigError(f"no enrollment request from serial {serial}")
            self.upsert(serial, state="approved", re_enroll=1)
            return "approved: its next request will be signed"
        if row["state"] == "revoked":
            raise ConfigError(f"serial {serial} is revoked; it cannot enroll again")
        if row["state"] == "enrolled" and not re_enroll:
            raise ConfigError(f"serial {serial} is enrolled already (as {row['device_id']}): give --re-enroll")
        self.upsert(serial, state="approved", re_enroll=int(re_enroll), answered=0)
        return "approved: the serving `fleet enroll serve` signs it"

    def reject(self, serial: str) -> None:
        if self.get(serial) is None:
            raise ConfigError(f"no enrollment request from serial {serial}")
        self.upsert(serial, state="rejected", reason="rejected by an operator", answered=0)

    def revoke(self, serial: str) -> None:
        self.upsert(serial, state="revoked", reason="revoked by an operator", answered=0)

    def unanswered(self, state: str) -> list[dict[str, Any]]:
        with self._connect() as db:
            db.row_factory = sqlite3.Row
            rows = db.execute(
                "SELECT * FROM serials WHERE state = ? AND answered = 0 AND request_id IS NOT NULL", (state,)
            ).fetchall()
        return [dict(row) for row in rows]
