"""The rollouts page's data: the rollouts' SQLite file (`fleet deploy --state`) as JSON, and a stamp that
changes whenever any process writes it, so the live feed re-reads it only then.

`fleet deploy` and `fleet resume` may run in other processes; they and the dashboard's own actions
write the same file (WAL: readers never block them).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from edge_sdk.core.sqlite_stamp import Stamp, sqlite_stamp
from edge_sdk.fleet.operator.rollout_json import rollout_json
from edge_sdk.fleet.operator.rollout_store import RolloutStore

RECENT_ROLLOUTS = 20


class RolloutsView:
    """Reads `path`, again only when `stamp()` says a process wrote it since the last `snapshot()`."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()
        self._store: RolloutStore | None = None
        self._stamp: Stamp | None = None
        self._snapshot: list[dict[str, Any]] = []

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None

    def stamp(self) -> Stamp:
        return sqlite_stamp(self.path)

    def snapshot(self) -> list[dict[str, Any]]:
        """The newest rollouts, newest first, each with every device's wave and outcome."""
        with self._lock:
            stamp = self.stamp()
            if stamp == self._stamp:
                return self._snapshot
            if not self.path.is_file():
                self._stamp, self._snapshot = stamp, []
                return []
            if self._store is None:
                self._store = RolloutStore(self.path)
            rows = self._store.list()[:RECENT_ROLLOUTS]
            self._snapshot = [rollout_json(self._store.load(row[0])) for row in rows]
            self._stamp = stamp
            return self._snapshot
