"""Real keys, real files and an artifact store, plus the deploy steps an agent runs with them."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from edge_sdk.fleet.device.agent import Agent
from edge_sdk.fleet.device.agent_config import AgentConfig
from edge_sdk.fleet.device.artifacts import ArtifactStore
from edge_sdk.fleet.wire.manifest import DeploymentManifest, DeviceIdentity
from edge_sdk.fleet.wire.signing import generate_signing_key, load_private_key, load_public_key, verify_manifest
from edge_sdk.mqtt import MqttSettings
from tests.support.clients import RecordingClient
from tools.harness.broker import BrokerFactory, FleetBroker, start_fleet_broker
from tools.harness.deployments import DEVICE_ID, PROFILE

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
DEVICE = DeviceIdentity(device_id="box-17", profile="x86-cpu", labels={"site": "lyon", "line": "3"})


def payload_for(version: int) -> bytes:
    """Deterministic, version-specific artifact bytes (a few chunks' worth)."""
    return hashlib.sha256(f"model v{version}".encode()).digest() * 100


def manifest_data(version: int, **overrides: Any) -> dict[str, Any]:
    """A valid manifest as JSON-ready data: one inline model artifact of 3,200 bytes."""
    content = payload_for(version)
    data: dict[str, Any] = {
        "deployment_id": f"rollout-{version}",
        "version": version,
        "created_at": (NOW - timedelta(days=30) + timedelta(hours=version)).isoformat(),
        "expires_at": (NOW + timedelta(days=7)).isoformat(),
        "target": {"profiles": ["x86-cpu"], "labels": {"site": "lyon"}},
        "artifacts": [
            {
                "name": "detector.onnx",
                "kind": "model",
                "size": len(content),
                "sha256": hashlib.sha256(content).hexdigest(),
                "source": {"type": "inline", "chunk_size": 1024, "chunk_count": -(-len(content) // 1024)},
            }
        ],
    }
    data.update(overrides)
    return data


def make_manifest(version: int, **overrides: Any) -> DeploymentManifest:
    return DeploymentManifest.model_validate(manifest_data(version, **overrides))


def flip_byte(data: bytes, index: int) -> bytes:
    return data[:index] + bytes([data[index] ^ 0x01]) + data[index + 1 :]


def write_random_file(path: Path, size: int) -> Path:
    path.write_bytes(os.urandom(size))
    return path


# ---------------------------------------------------------------- the store


def install(store: ArtifactStore, manifest: DeploymentManifest, signed: bytes | None = None) -> None:
    """Stage, commit and activate `manifest` with the bytes `payload_for` makes."""
    with store.stage(manifest, signed) as staging:
        staging.add_bytes("detector.onnx", payload_for(manifest.version))
        staging.commit()
    store.activate(manifest.version, manifest)


@pytest.fixture
def store(tmp_path: Path) -> ArtifactStore:
    return ArtifactStore(tmp_path / "store", keep=3)


# ---------------------------------------------------------------- keys and the deploy path


@dataclass(frozen=True)
class Keys:
    private: Ed25519PrivateKey
    public: Ed25519PublicKey
    folder: Path


@pytest.fixture(scope="session")
def operator_keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    folder = tmp_path_factory.mktemp("operator-keys")
    files = generate_signing_key(folder)
    return Keys(load_private_key(files.private_key), load_public_key(files.public_key), folder)


@pytest.fixture(scope="session")
def stranger_keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    folder = tmp_path_factory.mktemp("stranger-keys")
    files = generate_signing_key(folder, name="stranger")
    return Keys(load_private_key(files.private_key), load_public_key(files.public_key), folder)


Deploy = Callable[[bytes], DeploymentManifest]


@pytest.fixture
def deploy(store: ArtifactStore, operator_keys: Keys) -> Deploy:
    """The agent's deploy path in miniature: verify, stage, commit, activate (or, for a rollback, switch)."""

    def run(signed: bytes) -> DeploymentManifest:
        manifest = verify_manifest(signed, [operator_keys.public], DEVICE, NOW, store.version_state())
        if manifest.rollback:
            store.verify_version(manifest.version)
            store.activate(manifest.version, manifest)
        else:
            install(store, manifest, signed)
        return manifest

    return run


# --- a private broker with the shipped fleet config, and one agent on it (broker tests) -----------------


@pytest.fixture
def fleet(start_broker: BrokerFactory) -> FleetBroker:
    return start_fleet_broker(start_broker, devices=[DEVICE_ID], operators=["operator"])


@pytest.fixture
def agent(fleet: FleetBroker, tmp_path: Path, operator_keys: Keys) -> Iterator[Agent]:
    config = AgentConfig(
        device_id=DEVICE_ID,
        broker=fleet.settings(DEVICE_ID, client_id=DEVICE_ID, clean_start=False),
        store_dir=tmp_path / "store",
        trusted_keys_dir=operator_keys.folder,
        profile=PROFILE,
        engine_cache_dir=tmp_path / "engines",
    )
    with Agent(config) as running:
        yield running


@pytest.fixture
def pipeline_agent(tmp_path: Path, operator_keys: Keys) -> Iterator[Agent]:
    """An agent that runs deployed pipelines (its engines cached under tmp_path), answering through a
    recording client; its pipelines are stopped after the test."""
    config = AgentConfig(
        device_id=DEVICE_ID,
        broker=MqttSettings(client_id=DEVICE_ID, clean_start=False),
        store_dir=tmp_path / "store",
        trusted_keys_dir=operator_keys.folder,
        profile=PROFILE,
        engine_cache_dir=tmp_path / "engines",
    )
    agent = Agent(config, client=RecordingClient)
    yield agent
    agent.pipelines.stop_all()
    agent.deployer.close()
