"""Where a staged rollout lives between operator runs: one SQLite file, many rollouts.

Every state change is one committed transaction, so an operator that stops (or crashes) and runs
again finds each device where it was: done devices are never sent the deployment again.
"""

from __future__ import annotations

import enum
import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from edge_sdk.core.errors import RolloutNotFoundError
from edge_sdk.fleet.wire.manifest import TargetSelector
from edge_sdk.fleet.wire.protocol import Presence, ProtocolError, decode_presence, encode_message

SCHEMA = """
CREATE TABLE IF NOT EXISTS rollouts (
    id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    deployment_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    manifest BLOB NOT NULL,
    rollback_manifest BLOB,
    artifacts_dir TEXT,
    selector TEXT NOT NULL,
    first_wave INTEGER NOT NULL,
    rate_per_min REAL NOT NULL,
    abort_threshold REAL NOT NULL,
    command_timeout_s REAL NOT NULL,
    state TEXT NOT NULL,
    reason TEXT,
    aborted_wave INTEGER,
    rollback_key_file TEXT,
    rollback_key_id TEXT,
    broker_file TEXT
);
CREATE TABLE IF NOT EXISTS rollout_devices (
    rollout_id TEXT NOT NULL REFERENCES rollouts(id),
    device TEXT NOT NULL,
    position INTEGER NOT NULL,
    wave INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    via TEXT,
    reason TEXT,
    previous_version INTEGER,
    previous_desired BLOB,
    sent_at REAL,
    finished_at REAL,
    attempts INTEGER NOT NULL DEFAULT 0,
    rollback_manifest BLOB,
    PRIMARY KEY (rollout_id, device)
);
CREATE TABLE IF NOT EXISTS device_facts (
    device TEXT PRIMARY KEY,
    presence TEXT NOT NULL,
    seen_at REAL NOT NULL
);
"""
# Columns added after the first release of the file: (table, column, type), added to older files on open.
ADDED_COLUMNS = (
    ("rollouts", "rollback_key_file", "TEXT"),
    ("rollouts", "rollback_key_id", "TEXT"),
    ("rollout_devices", "rollback_manifest", "BLOB"),
    ("rollouts", "broker_file", "TEXT"),
)
ROLLOUT_COLUMNS = (  # the rollouts table's columns, in the order create() writes and load() reads them
    "id, created_at, updated_at, deployment_id, version, manifest, rollback_manifest, artifacts_dir, selector, "
    "first_wave, rate_per_min, abort_threshold, command_timeout_s, state, reason, aborted_wave, rollback_key_file, "
    "rollback_key_id, broker_file"
)


VIA_COMMAND = "command"
"""`DeviceProgress.via` of a device sent a deploy command."""
VIA_DESIRED = "desired"
"""`DeviceProgress.via` of a device that was offline and only given its desired state."""


class Outcome(str, enum.Enum):
    """Where one device of a rollout stands."""

    PENDING = "pending"  # not sent yet (or never: the rollout stopped first)
    SENT = "sent"  # deploy command sent, or desired state published for an offline device; no answer yet
    ACTIVE = "active"  # the device runs the new version
    ROLLED_BACK = "rolled_back"  # the device went back to its previous version (by itself or by us)
    REFUSED = "refused"  # the device refused the manifest and kept its version
    FAILED = "failed"  # deploy failed on the device (health check, activation, transfer)
    TIMED_OUT = "timed_out"  # no answer within the command timeout

    @property
    def done(self) -> bool:
        return self not in (Outcome.PENDING, Outcome.SENT)

    @property
    def failure(self) -> bool:
        return self in (Outcome.REFUSED, Outcome.FAILED, Outcome.TIMED_OUT)


class RolloutState(str, enum.Enum):
    RUNNING = "running"  # devices still to send to
    WAITING = "waiting"  # everything sent; some offline devices converge through their desired state
    COMPLETED = "completed"  # every device has a final outcome
    ABORTED = "aborted"  # the abort threshold was passed; the failing wave is rolled back (resumable)
    ROLLED_BACK = "rolled_back"  # an operator rolled the whole rollout back

    @property
    def finished(self) -> bool:
        return self in (RolloutState.COMPLETED, RolloutState.ABORTED, RolloutState.ROLLED_BACK)


@dataclass(frozen=True)
class RolloutSpec:
    """What to roll out and how fast; fixed when the rollout is created."""

    manifest: bytes
    deployment_id: str
    version: int
    selector: TargetSelector
    first_wave: int
    rate_per_min: float
    abort_threshold: float
    command_timeout_s: float = 30.0
    rollback_manifest: bytes | None = None
    artifacts_dir: Path | None = None
    rollback_key_file: Path | None = None
    """The operator's private key file that signs a rollback manifest per device (the path only, never the key)."""
    rollback_key_id: str | None = None
    """Id of the key that signs per-device rollback manifests (given as a file or in memory)."""
    broker_file: Path | None = None
    """The operator's broker settings file the rollout was started with (`fleet resume` and `rollback` reuse it)."""

    def __post_init__(self) -> None:
        if self.first_wave < 1:
            raise ValueError(f"expected a first wave of at least 1 device, got {self.first_wave}")
        if not self.rate_per_min > 0:
            raise ValueError(f"expected a rate above 0 devices per minute, got {self.rate_per_min}")
        if not 0 <= self.abort_threshold <= 1:
            raise ValueError(f"expected an abort threshold within 0..1, got {self.abort_threshold}")
        if not self.command_timeout_s > 0:
            raise ValueError(f"expected a command timeout above 0 s, got {self.command_timeout_s}")

    @property
    def wave_size(self) -> int:
        """Devices per later wave: what the rate sends in one minute (at least one)."""
        return max(1, int(self.rate_per_min))


@dataclass(frozen=True)
class TargetDevice:
    """A device selected for a rollout, with what it ran before (for rolling it back)."""

    device: str
    previous_version: int | None = None
    previous_desired: bytes | None = None


@dataclass(frozen=True)
class DeviceProgress:
    device: str
    position: int
    wave: int
    outcome: Outcome
    via: str | None
    reason: str | None
    previous_version: int | None
    previous_desired: bytes | None
    sent_at: float | None
    finished_at: float | None
    attempts: int
    rollback_manifest: bytes | None = None
    """The rollback manifest signed for this device alone (kept so a resumed rollback sends the same one)."""


@dataclass(frozen=True)
class RolloutRecord:
    id: str
    spec: RolloutSpec
    state: RolloutState
    reason: str | None
    created_at: float
    updated_at: float
    devices: list[DeviceProgress]
    aborted_wave: int | None = None
    """The wave whose failures stopped the rollout (its active devices are rolled back)."""

    def counts(self) -> dict[str, int]:
        """Devices per outcome (every outcome listed, zeros included)."""
        counts = {outcome.value: 0 for outcome in Outcome}
        for device in self.devices:
            counts[device.outcome.value] += 1
        return counts

    def wave(self, index: int) -> list[DeviceProgress]:
        return [d for d in self.devices if d.wave == index]

    @property
    def waves(self) -> int:
        return 1 + max((d.wave for d in self.devices), default=-1)


def assign_waves(count: int, first_wave: int, wave_size: int) -> list[int]:
    """Wave index of each of `count` devices in order: the first wave, then waves of `wave_size`."""
    return [0 if i < first_wave else 1 + (i - first_wave) // wave_size for i in range(count)]


class RolloutStore:
    """Rollouts in one SQLite file (WAL); thread-safe; one writer process at a time is expected."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), check_same_thread=False, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(SCHEMA)
        self._add_missing_columns()

    def _add_missing_columns(self) -> None:
        with self._lock, self._db:
            for table, column, kind in ADDED_COLUMNS:
                present = {row[1] for row in self._db.execute(f"PRAGMA table_info({table})")}
                if column not in present:
                    self._db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> RolloutStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ---------------------------------------------------------------- writing
    def create(self, spec: RolloutSpec, targets: list[TargetDevice], rollout_id: str | None = None) -> str:
        """Record a new rollout with its devices in order; returns its id."""
        names = [t.device for t in targets]
        if len(set(names)) != len(names):
            raise ValueError("expected each target device once")
        rollout_id = rollout_id or f"{spec.deployment_id}-v{spec.version}-{uuid.uuid4().hex[:6]}"
        now = time.time()
        waves = assign_waves(len(targets), spec.first_wave, spec.wave_size)
        with self._lock, self._db:
            self._db.execute(
                f"INSERT INTO rollouts ({ROLLOUT_COLUMNS}) VALUES ({', '.join('?' * (ROLLOUT_COLUMNS.count(',') + 1))})",
                (
                    rollout_id,
                    now,
                    now,
                    spec.deployment_id,
                    spec.version,
                    spec.manifest,
                    spec.rollback_manifest,
                    str(spec.artifacts_dir) if spec.artifacts_dir is not None else None,
                    spec.selector.model_dump_json(),
                    spec.first_wave,
                    spec.rate_per_min,
                    spec.abort_threshold,
                    spec.command_timeout_s,
                    RolloutState.RUNNING.value if targets else RolloutState.COMPLETED.value,
                    None if targets else "no device matched the selector",
                    None,
                    str(spec.rollback_key_file) if spec.rollback_key_file is not None else None,
                    spec.rollback_key_id,
                    str(spec.broker_file) if spec.broker_file is not None else None,
                ),
            )
            self._db.executemany(
                "INSERT INTO rollout_devices (rollout_id, device, position, wave, outcome, previous_version, "
                "previous_desired) VALUES (?,?,?,?,?,?,?)",
                [
                    (rollout_id, t.device, i, waves[i], Outcome.PENDING.value, t.previous_version, t.previous_desired)
                    for i, t in enumerate(targets)
                ],
            )
        return rollout_id

    def set_outcome(
        self, rollout_id: str, device: str, outcome: Outcome, reason: str | None = None, via: str | None = None
    ) -> None:
        now = time.time()
        sent = outcome is Outcome.SENT
        with self._lock, self._db:
            self._db.execute(
                "UPDATE rollout_devices SET outcome=?, reason=?, via=COALESCE(?, via), "
                "sent_at=CASE WHEN ? THEN ? ELSE sent_at END, finished_at=CASE WHEN ? THEN NULL ELSE ? END, "
                "attempts=attempts + ? WHERE rollout_id=? AND device=?",
                (outcome.value, reason, via, sent, now, sent, now, 1 if sent else 0, rollout_id, device),
            )
            self._db.execute("UPDATE rollouts SET updated_at=? WHERE id=?", (now, rollout_id))

    def set_rollback_manifest(self, rollout_id: str, device: str, envelope: bytes | None) -> None:
        """Keep the rollback manifest signed for `device` (before it is sent, so a restart resends the same one)."""
        with self._lock, self._db:
            self._db.execute(
                "UPDATE rollout_devices SET rollback_manifest=? WHERE rollout_id=? AND device=?",
                (envelope, rollout_id, device),
            )

    def set_state(
        self, rollout_id: str, state: RolloutState, reason: str | None = None, aborted_wave: int | None = None
    ) -> None:
        with self._lock, self._db:
            self._db.execute(
                "UPDATE rollouts SET state=?, reason=COALESCE(?, reason), aborted_wave=COALESCE(?, aborted_wave), "
                "updated_at=? WHERE id=?",
                (state.value, reason, aborted_wave, time.time(), rollout_id),
            )

    def remember_devices(self, facts: Iterable[Presence]) -> None:
        """Keep the last known facts (profile, labels, versions) of devices, to select them while offline."""
        now = time.time()
        rows = [(p.device, encode_message(p).decode("utf-8"), now) for p in facts if p.profile is not None]
        with self._lock, self._db:
            self._db.executemany("INSERT OR REPLACE INTO device_facts VALUES (?,?,?)", rows)

    def device_facts(self) -> list[Presence]:
        with self._lock:
            rows = self._db.execute("SELECT presence FROM device_facts ORDER BY device").fetchall()
        facts = []
        for (text,) in rows:
            try:
                facts.append(decode_presence(text.encode("utf-8")))
            except ProtocolError:
                continue
        return facts

    # ---------------------------------------------------------------- reading
    def load(self, rollout_id: str) -> RolloutRecord:
        with self._lock:
            row = self._db.execute(f"SELECT {ROLLOUT_COLUMNS} FROM rollouts WHERE id=?", (rollout_id,)).fetchone()
            if row is None:
                known = [r[0] for r in self._db.execute("SELECT id FROM rollouts ORDER BY created_at DESC LIMIT 5")]
                raise RolloutNotFoundError(
                    f"no rollout '{rollout_id}' in {self.path}; "
                    + (f"recent ones: {', '.join(known)}" if known else "it holds no rollouts")
                )
            devices = self._db.execute(
                "SELECT device, position, wave, outcome, via, reason, previous_version, previous_desired, "
                "sent_at, finished_at, attempts, rollback_manifest FROM rollout_devices WHERE rollout_id=? "
                "ORDER BY position",
                (rollout_id,),
            ).fetchall()
        (rid, created, updated, deployment_id, version, manifest, rollback, artifacts, selector) = row[:9]
        first_wave, rate, threshold, timeout, state, reason, aborted_wave, key_file, key_id, broker = row[9:]
        spec = RolloutSpec(
            manifest=bytes(manifest),
            deployment_id=deployment_id,
            version=version,
            selector=TargetSelector.model_validate(json.loads(selector)),
            first_wave=first_wave,
            rate_per_min=rate,
            abort_threshold=threshold,
            command_timeout_s=timeout,
            rollback_manifest=bytes(rollback) if rollback is not None else None,
            artifacts_dir=Path(artifacts) if artifacts is not None else None,
            rollback_key_file=Path(key_file) if key_file is not None else None,
            rollback_key_id=key_id,
            broker_file=Path(broker) if broker is not None else None,
        )
        progress = [
            DeviceProgress(
                device=d[0],
                position=d[1],
                wave=d[2],
                outcome=Outcome(d[3]),
                via=d[4],
                reason=d[5],
                previous_version=d[6],
                previous_desired=bytes(d[7]) if d[7] is not None else None,
                sent_at=d[8],
                finished_at=d[9],
                attempts=d[10],
                rollback_manifest=bytes(d[11]) if d[11] is not None else None,
            )
            for d in devices
        ]
        return RolloutRecord(rid, spec, RolloutState(state), reason, created, updated, progress, aborted_wave)

    def list(self) -> list[tuple[str, str, int, float]]:
        """(id, state, version, created_at) of every rollout, newest first."""
        with self._lock:
            rows = self._db.execute("SELECT id, state, version, created_at FROM rollouts ORDER BY created_at DESC")
            return [(r[0], r[1], r[2], r[3]) for r in rows]

    def latest(self) -> str | None:
        rows = self.list()
        return rows[0][0] if rows else None
