"""Each result handed to the device agent, which publishes it over its own MQTT connection.

On a managed device the broker admits one connection per certificate, and only the agent holds the
device certificate, so a pipeline cannot publish results itself. A `type: agent` sink writes each
result (`Result.to_dict()` as JSON, the mqtt sink's payload) to the agent's outbox: a small SQLite
file in WAL mode under the agent's store, shared across processes and kept across restarts. The
agent drains it in order to `edge/<device>/results/<pipeline>/<source>` at QoS 1 (its disk spool, when
configured, covers broker outages) and deletes an entry once its client accepted it (acknowledged or
spooled).

The agent passes the outbox path to the pipelines it starts in the environment variable
EDGE_SDK_AGENT_OUTBOX (stage processes inherit it). The outbox is bounded (`max_entries`, set by the
agent): the oldest entries are evicted and counted. A write never waits more than a short lock timeout;
a write that fails is dropped, counted and logged, never raised into the pipeline.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field

from edge_sdk.core.errors import SinkError
from edge_sdk.core.results import Result

from .base import Sink, SinkSpecBase

log = logging.getLogger(__name__)

OUTBOX_ENV = "EDGE_SDK_AGENT_OUTBOX"
"""Environment variable with the outbox file; set by the device agent for the pipelines it runs."""
DEFAULT_MAX_ENTRIES = 10_000
WRITE_TIMEOUT_S = 0.25

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS results ("
    "id INTEGER PRIMARY KEY AUTOINCREMENT, pipeline TEXT NOT NULL, source TEXT NOT NULL, payload BLOB NOT NULL)",
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)",
)


@dataclass(frozen=True)
class ResultsOutboxEntry:
    id: int
    pipeline: str
    source: str
    payload: bytes


class ResultsOutbox:
    """The outbox file (both sides): `put` for sinks, `peek`/`delete` for the agent; one connection per process."""

    def __init__(self, path: Path, *, create: bool = False, max_entries: int | None = None, timeout: float = 5.0):
        self.path = path
        if not create and not path.is_file():
            raise SinkError(f"agent outbox {path} does not exist; the device agent creates it when it starts")
        if create:
            path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), timeout=timeout, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        if create:
            for statement in _SCHEMA:
                self._db.execute(statement)
            if max_entries is not None:
                if max_entries < 1:
                    raise ValueError(f"expected max_entries >= 1, got {max_entries}")
                self._db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('max_entries', ?)", (max_entries,))

    def put(self, pipeline: str, source: str, payload: bytes) -> int:
        """Append one entry, evicting the oldest beyond max_entries; returns how many were evicted."""
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            cursor = db.execute(
                "INSERT INTO results (pipeline, source, payload) VALUES (?, ?, ?)", (pipeline, source, payload)
            )
            newest = cursor.lastrowid or 0
            evicted = db.execute(
                "DELETE FROM results WHERE id <= ? - "
                f"COALESCE((SELECT value FROM meta WHERE key = 'max_entries'), {DEFAULT_MAX_ENTRIES})",
                (newest,),
            ).rowcount
            if evicted:
                db.execute(
                    "INSERT INTO meta (key, value) VALUES ('evicted', ?) "
                    "ON CONFLICT(key) DO UPDATE SET value = value + excluded.value",
                    (evicted,),
                )
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        return evicted

    def peek(self, limit: int = 100) -> list[ResultsOutboxEntry]:
        """The oldest `limit` entries, oldest first."""
        rows = self._db.execute(
            "SELECT id, pipeline, source, payload FROM results ORDER BY id LIMIT ?", (limit,)
        ).fetchall()
        return [ResultsOutboxEntry(int(r[0]), str(r[1]), str(r[2]), bytes(r[3])) for r in rows]

    def delete(self, entry_id: int) -> None:
        self._db.execute("DELETE FROM results WHERE id = ?", (entry_id,))

    def waiting(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM results").fetchone()[0])

    def evicted(self) -> int:
        row = self._db.execute("SELECT value FROM meta WHERE key = 'evicted'").fetchone()
        return int(row[0]) if row else 0

    def close(self) -> None:
        self._db.close()


def outbox_from_environment() -> Path:
    """The agent's outbox file from EDGE_SDK_AGENT_OUTBOX; SinkError outside a pipeline the agent started."""
    value = os.environ.get(OUTBOX_ENV, "").strip()
    if not value:
        raise SinkError(
            f"agent sink: {OUTBOX_ENV} is not set; a 'type: agent' sink only works in a pipeline started "
            "by the device agent (edge-sdk fleet agent); use an mqtt or jsonl sink elsewhere"
        )
    outbox = Path(value)
    if not outbox.is_file():
        raise SinkError(
            f"agent sink: the agent outbox {outbox} ({OUTBOX_ENV}) does not exist; a 'type: agent' sink only "
            "works in a pipeline started by the device agent"
        )
    return outbox


class AgentSinkSpec(SinkSpecBase):
    type: Literal["agent"] = Field(
        description="Hand each result to the device agent, which publishes it to "
        "edge/<device>/results/<pipeline>/<source> (only in pipelines the agent runs)."
    )
    include_empty: bool = Field(False, description="Also hand over frames with no detections and no classifications.")

    def build(self, pipeline_name: str) -> AgentSink:
        return AgentSink.from_spec(self, pipeline_name=pipeline_name)

    def check(self) -> None:
        """Only inside a device agent: it gives the sink its outbox."""
        outbox_from_environment()


class AgentSink(Sink):
    writes_updates = True

    def __init__(self, pipeline_name: str, include_empty: bool = False, outbox: Path | None = None):
        outbox = outbox_from_environment() if outbox is None else outbox
        self.outbox_path = outbox
        self.pipeline_name = pipeline_name
        self.include_empty = include_empty
        self.name = f"agent:{outbox}"
        self._outbox: ResultsOutbox | None = None
        self.handed = 0
        self.skipped_empty = 0
        self.failed = 0
        self.evicted = 0
        self._failing = False

    @classmethod
    def from_spec(cls, spec: AgentSinkSpec, pipeline_name: str) -> AgentSink:
        return cls(pipeline_name, include_empty=spec.include_empty)

    def open(self) -> None:
        self._outbox = ResultsOutbox(self.outbox_path, timeout=WRITE_TIMEOUT_S)

    def write(self, result: Result, image: np.ndarray) -> None:
        if not self.include_empty and not result.detections and not result.classifications:
            self.skipped_empty += 1
            return
        if self._outbox is None:
            raise SinkError(f"{self.name} is not open")
        payload = json.dumps(result.to_dict()).encode()
        try:
            self.evicted += self._outbox.put(self.pipeline_name, result.frame.source, payload)
        except sqlite3.Error as exc:
            self.failed += 1
            if not self._failing:
                self._failing = True
                log.warning(
                    "%s: dropping results, the outbox is unavailable (%s); %d so far", self.name, exc, self.failed
                )
            return
        self.handed += 1
        self._failing = False

    def close(self) -> None:
        if self._outbox is not None:
            self._outbox.close()
            self._outbox = None
        if self.failed or self.evicted:
            log.warning(
                "%s closed: %d handed, %d dropped, %d evicted", self.name, self.handed, self.failed, self.evicted
            )
