"""Simulated devices that speak the fleet protocol over a real broker (for operator and rollout tests, and benches).

A `SimDevice` is a real protocol peer, not a mock: it connects with its own `MqttClient`, publishes
its retained presence (with the offline last will) and reported state, answers commands on its
response topic with the command's correlation data, asks for inline chunks with `need_chunks` and
assembles them, and converges to its retained desired state on connect. It does not verify
signatures or build engines (the real agent does); `behaviour` decides how a deploy ends:

- "ok": active;
- "health_fail": fails its health check and stays on (rolls back to) its previous version;
- "refuse": refuses the manifest, keeps its version;
- "silent": never answers commands (and ignores desired state).

Like the agent, it publishes its presence and reported state again after every reconnect.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from edge_sdk.fleet.operator.client import manifest_of
from edge_sdk.fleet.wire.chunks import decode_chunk
from edge_sdk.fleet.wire.manifest import DeploymentManifest, InlineSource
from edge_sdk.fleet.wire.protocol import (
    HEALTH_FAILED,
    REFUSED,
    Command,
    ErrorInfo,
    LastDeploy,
    Presence,
    ReportedState,
    Response,
    decode_command,
    decode_desired,
    encode_message,
    offline_presence,
)
from edge_sdk.fleet.wire.signing import sign_manifest
from edge_sdk.mqtt import ConnectionEvent, ConnectionState, Message, MqttClient, MqttSettings, Will
from edge_sdk.mqtt.topics import DeviceTopics

BEHAVIOURS = ("ok", "health_fail", "refuse", "silent")


@dataclass
class _Transfer:
    count: int
    have: set[int]


class SimDevice:
    """One simulated device; `start()` connects it (again), `stop()` takes it offline."""

    def __init__(
        self,
        settings: MqttSettings,
        device: str,
        *,
        profile: str = "x86-cpu",
        labels: dict[str, str] | None = None,
        behaviour: str = "ok",
        active_version: int | None = 1,
        kept: set[int] | None = None,
    ):
        if behaviour not in BEHAVIOURS:
            raise ValueError(f"behaviour must be one of {BEHAVIOURS}")
        self.device = device
        self.topics = DeviceTopics(device)
        self.settings = settings.model_copy(
            update={
                "client_id": settings.client_id or device,
                "will": Will(topic=self.topics.state, payload=offline_presence(device).decode(), qos=1, retain=True),
            }
        )
        self.profile = profile
        self.labels = labels or {}
        self.behaviour = behaviour
        self.active_version = active_version
        self.kept: set[int] = set(kept or ({active_version} if active_version else set()))
        self.applied_revision = 0
        self.last_deploy: LastDeploy | None = None
        self.commands: Counter[str] = Counter()
        self.deploys_by_version: Counter[int] = Counter()
        self.activations: Counter[int] = Counter()
        self.chunks_received = 0
        self._transfers: dict[tuple[int, str], _Transfer] = {}
        self._lock = threading.RLock()
        self.client: MqttClient | None = None

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> SimDevice:
        client = MqttClient(self.settings)
        self.client = client
        client.connect()
        client.subscribe(self.topics.cmd, self._on_command, qos=1)
        client.subscribe(self.topics.artifacts("#"), self._on_chunk, qos=1)
        self._publish_presence()
        self._publish_reported()
        client.subscribe(self.topics.desired, self._on_desired, qos=1)
        client.add_listener(self._on_connection)
        return self

    def _on_connection(self, event: ConnectionEvent) -> None:
        """Back after a lost connection: say so again, as the agent does (the broker may have published
        the offline will meanwhile, or lost its retained state)."""
        if event.state is ConnectionState.CONNECTED and event.previous is ConnectionState.RECONNECTING:
            self._publish_presence()
            self._publish_reported()

    def stop(self) -> None:
        """Go offline: publish the offline presence (as the will would) and disconnect."""
        client, self.client = self.client, None
        if client is None:
            return
        client.publish(self.topics.state, offline_presence(self.device), qos=1, retain=True)
        client.disconnect()

    # ---------------------------------------------------------------- publishing
    def _publish(self, topic: str, payload: bytes, retain: bool = False) -> None:
        client = self.client
        if client is not None:
            client.publish(topic, payload, qos=1, retain=retain, wait=False)

    def _publish_presence(self) -> None:
        presence = Presence(
            device=self.device,
            online=True,
            profile=self.profile,
            labels=self.labels,
            sdk_version="sim",
            active_version=self.active_version,
            models=["detector.onnx"] if self.active_version else [],
            health="ok",
            since=datetime.now(timezone.utc),
        )
        self._publish(self.topics.state, encode_message(presence), retain=True)

    def _publish_reported(self) -> None:
        reported = ReportedState(
            device=self.device,
            applied_revision=self.applied_revision,
            active_version=self.active_version,
            last_deploy=self.last_deploy,
        )
        self._publish(self.topics.reported, encode_message(reported), retain=True)

    # ---------------------------------------------------------------- handlers (paho's thread)
    def _on_command(self, message: Message) -> None:
        command = decode_command(message.payload)
        with self._lock:
            self.commands[command.name] += 1
            if self.behaviour == "silent":
                return
            if command.name == "deploy":
                response = self._deploy(command)
            elif command.name == "rollback":
                response = self._rollback(command)
            elif command.name == "ping":
                response = self._ok(command, {"pong": True})
            elif command.name == "report":
                response = self._ok(command, {"active_version": self.active_version})
            else:
                response = self._error(command, "unknown_command", f"no handler for {command.name!r}")
        self._publish(self.topics.resp, encode_message(response))

    def _on_chunk(self, message: Message) -> None:
        chunk = decode_chunk(message.payload)
        with self._lock:
            transfer = self._transfers.get((chunk.version, chunk.artifact))
            if transfer is not None:
                transfer.have.add(chunk.index)
                self.chunks_received += 1

    def _on_desired(self, message: Message) -> None:
        if not message.payload or self.behaviour == "silent":
            return
        desired = decode_desired(message.payload)
        with self._lock:
            if desired.revision <= self.applied_revision:
                return
            self.applied_revision = desired.revision
            if desired.deployment is not None:
                manifest = manifest_of(desired.deployment.encode())
                if manifest.version != self.active_version:
                    self._apply(manifest, chunks_needed=False)
        self._publish_reported()
        self._publish_presence()

    # ---------------------------------------------------------------- deploy logic
    def _deploy(self, command: Command) -> Response:
        manifest = manifest_of(str(command.args["manifest"]).encode())
        self.deploys_by_version[manifest.version] += 1
        if manifest.version == self.active_version:
            return self._ok(command, {"status": "active", "version": manifest.version})
        if self.behaviour == "refuse":
            return self._fail(command, manifest, REFUSED, "signature refused (simulated)", "bad-signature")
        missing = self._missing(manifest)
        if missing:
            return self._ok(command, {"status": "need_chunks", "missing": missing})
        return self._finish(command, manifest)

    def _finish(self, command: Command, manifest: DeploymentManifest) -> Response:
        ok = self._apply(manifest, chunks_needed=True)
        self._publish_reported()
        self._publish_presence()
        if ok:
            return self._ok(command, {"status": "active", "version": manifest.version})
        return self._error(
            command,
            HEALTH_FAILED,
            f"health check failed (simulated); rolled back to version {self.active_version}",
        )

    def _apply(self, manifest: DeploymentManifest, chunks_needed: bool) -> bool:
        at = datetime.now(timezone.utc)
        if self.behaviour == "refuse":
            self.last_deploy = LastDeploy(version=manifest.version, outcome="refused", reason="simulated", at=at)
            return False
        if self.behaviour == "health_fail":
            self.last_deploy = LastDeploy(version=manifest.version, outcome="rolled_back", reason="health", at=at)
            return False
        self.active_version = manifest.version
        self.activations[manifest.version] += 1
        self.kept.add(manifest.version)
        self.last_deploy = LastDeploy(version=manifest.version, outcome="active", at=at)
        return True

    def _rollback(self, command: Command) -> Response:
        manifest = manifest_of(str(command.args["manifest"]).encode())
        if not manifest.rollback or manifest.version not in self.kept:
            return self._error(command, REFUSED, "not a rollback to a kept version", "rollback-unavailable")
        self.active_version = manifest.version
        self.last_deploy = LastDeploy(version=manifest.version, outcome="active", at=datetime.now(timezone.utc))
        self._publish_reported()
        self._publish_presence()
        return self._ok(command, {"status": "active", "version": manifest.version})

    def _missing(self, manifest: DeploymentManifest) -> dict[str, list[list[int]]]:
        missing: dict[str, list[list[int]]] = {}
        for artifact in manifest.artifacts:
            if not isinstance(artifact.source, InlineSource):
                continue
            key = (manifest.version, artifact.name)
            transfer = self._transfers.setdefault(key, _Transfer(artifact.source.chunk_count, set()))
            gaps = [i for i in range(transfer.count) if i not in transfer.have]
            if gaps:
                missing[artifact.name] = _ranges(gaps)
        return missing

    # ---------------------------------------------------------------- responses
    def _ok(self, command: Command, result: dict[str, Any]) -> Response:
        return Response(id=command.id, device=self.device, name=command.name, ok=True, result=result)

    def _error(self, command: Command, reason: str, message: str, detail: str | None = None) -> Response:
        error = ErrorInfo(reason=reason, message=message, detail=detail)
        return Response(id=command.id, device=self.device, name=command.name, ok=False, error=error)

    def _fail(self, command: Command, manifest: DeploymentManifest, reason: str, message: str, detail: str) -> Response:
        self.last_deploy = LastDeploy(
            version=manifest.version, outcome="refused", reason=message, at=datetime.now(timezone.utc)
        )
        self._publish_reported()
        return self._error(command, reason, message, detail)


def _ranges(indices: list[int]) -> list[list[int]]:
    ranges: list[list[int]] = []
    for index in indices:
        if ranges and ranges[-1][1] == index - 1:
            ranges[-1][1] = index
        else:
            ranges.append([index, index])
    return ranges


def version_of(envelope: str | bytes) -> int:
    data = json.loads(envelope)
    return int(json.loads(data["manifest"])["version"])


def signed_deployment(
    private_key: Ed25519PrivateKey,
    version: int,
    artifacts_dir: Path,
    *,
    rollback: bool = False,
    size: int = 3000,
    chunk_size: int = 1024,
    target: dict[str, Any] | None = None,
) -> bytes:
    """A signed envelope for version `version` with one inline model whose bytes are written to `artifacts_dir`."""
    artifacts_dir.mkdir(parents=True, exist_ok=True)
    content = (hashlib.sha256(f"model v{version}".encode()).digest() * (size // 32 + 1))[:size]
    (artifacts_dir / "detector.onnx").write_bytes(content)
    now = datetime.now(timezone.utc)
    manifest = DeploymentManifest.model_validate(
        {
            "deployment_id": f"sim-{version}{'-rollback' if rollback else ''}",
            "version": version,
            "created_at": (now - timedelta(minutes=10) + timedelta(seconds=version)).isoformat(),
            "expires_at": (now + timedelta(days=1)).isoformat(),
            "target": target if target is not None else {"profiles": ["x86-cpu"]},
            "rollback": rollback,
            "artifacts": [
                {
                    "name": "detector.onnx",
                    "kind": "model",
                    "size": size,
                    "sha256": hashlib.sha256(content).hexdigest(),
                    "source": {"type": "inline", "chunk_size": chunk_size, "chunk_count": -(-size // chunk_size)},
                }
            ],
        }
    )
    return sign_manifest(manifest, private_key).to_bytes()
