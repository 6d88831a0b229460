"""What an operator can do from the dashboard, through the same operator code as the CLI: `fleet exec`'s
commands (ping, start and stop a pipeline), `fleet deploy` of a signed manifest already on disk, and
`fleet resume` / `fleet rollback` of a recorded rollout.

A command waits for the device's answer (like `fleet exec`); a rollout runs on a thread of its own (like
`fleet deploy` in another terminal) and shows on the rollouts page as it goes. Deployable manifests are
the signed files in the folder given at start (`--manifests`); the page names one by file name, never by
path, so no request can make the dashboard read another file.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from edge_sdk.core.errors import ConfigError, EdgeSDKError
from edge_sdk.fleet.operator.client import FleetOperator, manifest_of
from edge_sdk.fleet.operator.deployment_file import artifact_file_problems, raise_problems
from edge_sdk.fleet.operator.rollout import RolloutRunner
from edge_sdk.fleet.operator.rollout_plan import create_rollout
from edge_sdk.fleet.operator.rollout_rollback import roll_back_rollout
from edge_sdk.fleet.operator.rollout_store import RolloutStore
from edge_sdk.fleet.operator.selection import parse_selector
from edge_sdk.fleet.wire.protocol import Name

log = logging.getLogger(__name__)
_NAME: TypeAdapter[str] = TypeAdapter(Name)

MANIFEST_SUFFIXES = (".signed", ".json")
MAX_MANIFEST_BYTES = 1 << 20
COMMAND_TIMEOUT_S = 15.0


@dataclass
class Job:
    """A rollout action running in the background, as the page lists it."""

    id: int
    action: str
    rollout: str | None
    started_at: float
    state: str = "running"
    message: str = ""


class DashboardActions:
    """Runs actions for a dashboard connected as `operator`; rollouts go to the SQLite file `state_file`."""

    def __init__(
        self,
        operator: FleetOperator,
        state_file: Path,
        manifests_dir: Path | None = None,
        key_file: Path | None = None,
        broker_file: Path | None = None,
        command_timeout_s: float = COMMAND_TIMEOUT_S,
    ):
        self.operator = operator
        self.state_file = state_file
        self.manifests_dir = manifests_dir
        self.key_file = key_file
        self.broker_file = broker_file
        self.command_timeout_s = command_timeout_s
        self._jobs: list[Job] = []
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- device commands
    def command(self, device: str, name: str, pipeline: str | None = None) -> dict[str, Any]:
        """ping, start or stop (a pipeline) on `device`; the device's response as JSON."""
        if name not in ("ping", "start", "stop"):
            raise ConfigError(f"unknown action {name!r}: expected ping, start or stop")
        if not self.operator.device(device).online:
            raise ConfigError(f"device {device!r} is offline")
        args: dict[str, Any] = {}
        if name != "ping":
            if not pipeline:
                raise ConfigError(f"{name} needs a pipeline name")
            args["pipeline"] = _pipeline_name(pipeline)
        response = self.operator.request(device, name, args, timeout=self.command_timeout_s)
        return response.model_dump(mode="json")

    # ---------------------------------------------------------------- rollouts
    def manifests(self) -> list[str]:
        """The signed manifests the page may deploy: file names in the manifests folder."""
        if self.manifests_dir is None or not self.manifests_dir.is_dir():
            return []
        return sorted(p.name for p in self.manifests_dir.iterdir() if p.is_file() and p.suffix in MANIFEST_SUFFIXES)

    def deploy(
        self, manifest_name: str, select: list[str], first_wave: int, rate_per_min: float, abort_threshold: float
    ) -> str:
        """Record a rollout of the manifest file `manifest_name` and run it in the background; its id."""
        path = self._manifest_path(manifest_name)
        envelope = path.read_bytes()
        try:
            manifest = manifest_of(envelope)
        except EdgeSDKError as exc:
            raise ConfigError(f"{manifest_name}: {exc}") from None
        raise_problems(manifest_name, artifact_file_problems(manifest, path.parent, manifest_name, require=True))
        if first_wave < 1 or rate_per_min <= 0 or not 0 <= abort_threshold <= 1:
            raise ConfigError("expected first wave >= 1, rate > 0 and abort threshold in 0..1")
        with RolloutStore(self.state_file) as store:
            try:
                rollout_id = create_rollout(
                    self.operator,
                    store,
                    envelope,
                    selector=parse_selector(select, what="select"),
                    first_wave=first_wave,
                    rate_per_min=rate_per_min,
                    abort_threshold=abort_threshold,
                    artifacts_dir=path.parent,
                    signing_key=self.key_file,
                    broker_file=self.broker_file,
                )
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        self._background("deploy", rollout_id, self._run_rollout)
        return rollout_id

    def resume(self, rollout_id: str) -> None:
        self._known_rollout(rollout_id)
        self._background("resume", rollout_id, self._run_rollout)

    def rollback(self, rollout_id: str) -> None:
        self._known_rollout(rollout_id)
        self._background("rollback", rollout_id, self._roll_back)

    def jobs(self) -> list[dict[str, Any]]:
        with self._lock:
            return [job.__dict__.copy() for job in self._jobs[-20:]]

    def _run_rollout(self, store: RolloutStore, rollout_id: str) -> str:
        record = RolloutRunner(self.operator, store, rollout_id, signing_key=self.key_file).run()
        return record.state.value + (f" ({record.reason})" if record.reason else "")

    def _roll_back(self, store: RolloutStore, rollout_id: str) -> str:
        record = roll_back_rollout(self.operator, store, rollout_id, signing_key=self.key_file)
        return record.state.value

    def _background(self, action: str, rollout_id: str, work: Any) -> None:
        with self._lock:
            if any(job.rollout == rollout_id and job.state == "running" for job in self._jobs):
                raise ConfigError(f"rollout {rollout_id} already has an action running")
            job = Job(len(self._jobs) + 1, action, rollout_id, time.time())
            self._jobs.append(job)

        def run() -> None:
            try:
                with RolloutStore(self.state_file) as store:
                    job.message = work(store, rollout_id)
                job.state = "done"
            except Exception as exc:  # shown on the page; the dashboard keeps serving
                log.exception("dashboard: %s of %s failed", action, rollout_id)
                job.state, job.message = "failed", str(exc)

        threading.Thread(target=run, name=f"dashboard-{action}", daemon=True).start()

    def _known_rollout(self, rollout_id: str) -> None:
        if not self.state_file.is_file():
            raise ConfigError(f"no rollouts yet ({self.state_file} does not exist)")
        with RolloutStore(self.state_file) as store:
            if rollout_id not in {row[0] for row in store.list()}:
                raise ConfigError(f"unknown rollout {rollout_id!r}")

    def _manifest_path(self, name: str) -> Path:
        if name not in self.manifests():
            raise ConfigError(f"{name!r} is not a signed manifest in the dashboard's manifests folder")
        assert self.manifests_dir is not None
        path = self.manifests_dir / name
        if path.stat().st_size > MAX_MANIFEST_BYTES:
            raise ConfigError(f"{name}: larger than {MAX_MANIFEST_BYTES} bytes")
        return path


def _pipeline_name(text: str) -> str:
    try:
        return _NAME.validate_python(text)
    except ValidationError:
        raise ConfigError(f"expected a pipeline name (letters, digits, '.', '_', '-'), got {text!r}") from None
