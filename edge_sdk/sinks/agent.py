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

With `preview:` (agent_preview.py) the sink also keeps the latest thumbnail of each source in the
outbox's `previews` table, one row per (pipeline, source), replaced by each newer one; the agent
publishes each once (`sent`), at QoS 0, apart from the results.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field

from edge_sdk.core.errors import SinkError
from edge_sdk.core.results import Result

from .agent_preview import AgentPreviewSpec, Thumbnails
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
    "CREATE TABLE IF NOT EXISTS previews (pipeline TEXT NOT NULL, source TEXT NOT NULL, seq INTEGER NOT NULL, "
    "at REAL NOT NULL, jpeg BLOB NOT NULL, sent INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (pipeline, source))",
)


@dataclass(frozen=True)
class ResultsOutboxEntry:
    id: int
    pipeline: str
    source: str
    payload: bytes


@dataclass(frozen=True)
class PreviewEntry:
    pipeline: str
    source: str
    seq: int
    """Counts the thumbnails of this (pipeline, source): marking one sent leaves a newer one unsent."""
    at: float
    """When it was made (seconds since the epoch)."""
    jpeg: bytes


class ResultsOutbox:
    """The outbox file (both sides): `put` and `put_preview` for sinks, `peek`/`delete` and
    `unsent_previews`/`preview_sent` for the agent; one connection per process (the agent has two)."""

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

    def put_preview(self, pipeline: str, source: str, jpeg: bytes, at: float) -> None:
        """Make `jpeg` the latest preview of (pipeline, source), not yet sent."""
        self._db.execute(
            "INSERT INTO previews (pipeline, source, seq, at, jpeg, sent) VALUES (?, ?, 1, ?, ?, 0) "
            "ON CONFLICT(pipeline, source) DO UPDATE SET "
            "seq = previews.seq + 1, at = excluded.at, jpeg = excluded.jpeg, sent = 0",
            (pipeline, source, at, jpeg),
        )

    def unsent_previews(self) -> list[PreviewEntry]:
        rows = self._db.execute(
            "SELECT pipeline, source, seq, at, jpeg FROM previews WHERE sent = 0 ORDER BY at"
        ).fetchall()
        return [PreviewEntry(str(r[0]), str(r[1]), int(r[2]), float(r[3]), bytes(r[4])) for r in rows]

    def preview_sent(self, entry: PreviewEntry) -> None:
        """Mark `entry` sent, unless a newer preview has replaced it meanwhile."""
        self._db.execute(
            "UPDATE previews SET sent = 1 WHERE pipeline = ? AND source = ? AND seq = ?",
            (entry.pipeline, entry.source, entry.seq),
        )

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
    preview: AgentPreviewSpec | None = Field(
        None,
        description="Opt-in thumbnails: the annotated frame of each source, small, at most every `every_s` "
        "seconds, published by the agent to edge/<device>/telemetry/preview/<pipeline>/<source>; null: none.",
    )

    def build(self, pipeline_name: str) -> AgentSink:
        return AgentSink.from_spec(self, pipeline_name=pipeline_name)

    def check(self) -> None:
        """Only inside a device agent: it gives the sink its outbox."""
        outbox_from_environment()


class AgentSink(Sink):
    writes_updates = True

    def __init__(
        self,
        pipeline_name: str,
        include_empty: bool = False,
        outbox: Path | None = None,
        preview: AgentPreviewSpec | None = None,
    ):
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
        self.thumbnails = Thumbnails(preview) if preview is not None else None
        self.previews = 0
        """Thumbnails stored in the outbox."""
        self.previews_failed = 0
        """Thumbnails that could not be made or stored (those too big for max_bytes are thumbnails.too_big)."""
        self._preview_failing = False

    @classmethod
    def from_spec(cls, spec: AgentSinkSpec, pipeline_name: str) -> AgentSink:
        return cls(pipeline_name, include_empty=spec.include_empty, preview=spec.preview)

    def open(self) -> None:
        self._outbox = ResultsOutbox(self.outbox_path, timeout=WRITE_TIMEOUT_S)

    def write(self, result: Result, image: np.ndarray) -> None:
        if self.thumbnails is not None and image.size and self.thumbnails.due(result.frame.source):
            self._preview(result, image)
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

    def _preview(self, result: Result, image: np.ndarray) -> None:
        """Store this frame's thumbnail; a failure is counted and logged once in a row, never raised."""
        assert self.thumbnails is not None
        if self._outbox is None:
            raise SinkError(f"{self.name} is not open")
        try:
            jpeg = self.thumbnails.make(result, image)
            if jpeg is None:
                if self.thumbnails.too_big == 1:
                    log.warning(
                        "%s: a %dx%d preview does not fit in %d bytes even at JPEG quality 35; skipped",
                        self.name,
                        image.shape[1],
                        image.shape[0],
                        self.thumbnails.spec.max_bytes,
                    )
                return
            self._outbox.put_preview(self.pipeline_name, result.frame.source, jpeg, time.time())
        except Exception as exc:  # a preview is a nicety: whatever breaks it, results go on
            self.previews_failed += 1
            if not self._preview_failing:
                self._preview_failing = True
                log.warning("%s: preview not stored (%s); %d so far", self.name, exc, self.previews_failed)
            return
        self.previews += 1
        self._preview_failing = False

    def close(self) -> None:
        if self._outbox is not None:
            self._outbox.close()
            self._outbox = None
        too_big = self.thumbnails.too_big if self.thumbnails is not None else 0
        if self.failed or self.evicted or self.previews_failed or too_big:
            log.warning(
                "%s closed: %d handed, %d dropped, %d evicted; previews: %d stored, %d failed, %d too big",
                self.name,
                self.handed,
                self.failed,
                self.evicted,
                self.previews,
                self.previews_failed,
                too_big,
            )
