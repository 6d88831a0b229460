"""`agent.yaml`: who the device is, how it reaches the broker, where it keeps versions, whom it trusts.

Relative paths in the file are relative to the file's folder, so a config folder can be moved as a whole
(certificates, trusted keys and the config side by side).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from edge_sdk.core.errors import ConfigError
from edge_sdk.core.yaml_model import load_yaml_model
from edge_sdk.fleet.wire.broker_file import resolve_broker_paths
from edge_sdk.fleet.wire.manifest import IDENTIFIER_PATTERN
from edge_sdk.fleet.wire.protocol import MAX_COMMAND_BYTES
from edge_sdk.mqtt import MqttSettings

Identifier = Annotated[str, Field(pattern=IDENTIFIER_PATTERN)]


class AgentConfig(BaseModel):
    """The device agent's configuration (`edge-sdk agent --config agent.yaml`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    device_id: Identifier = Field(description="This device's id: the common name of its client certificate.")
    broker: MqttSettings = Field(
        description="Broker connection: TLS with the device certificate, clean_start false (persistent session)."
    )
    store_dir: Path = Field(description="Artifact store: one folder per deployed version, `current` link, state.")
    trusted_keys_dir: Path = Field(
        Path("trusted-keys"), description="Folder of the operators' Ed25519 public keys (*.pub) the device trusts."
    )
    profile: Identifier | None = Field(None, description="Device profile name; detected from the host when null.")
    profile_dir: Path | None = Field(None, description="Folder of device profiles; the shipped ones when null.")
    labels: dict[Identifier, Annotated[str, Field(max_length=256)]] = Field(
        default_factory=dict, description="Labels deployments can select on, e.g. {site: lyon}."
    )
    engine_cache_dir: Path | None = Field(None, description="Engine cache folder; the SDK's default when null.")
    keep_versions: int = Field(3, ge=2, le=100, description="Versions kept on disk (at least current and previous).")
    max_command_bytes: int = Field(
        MAX_COMMAND_BYTES, ge=1024, le=64 * 2**20, description="Larger commands and desired states are refused."
    )
    max_pending_chunk_bytes: int = Field(
        256 * 2**20, ge=2**20, description="Chunk bytes waiting to be written; beyond it chunks are dropped (resent)."
    )
    max_outbox_results: int = Field(
        10_000,
        ge=1,
        description="Results of `type: agent` sinks waiting to be published; beyond it the oldest are evicted.",
    )
    stats_interval_s: float = Field(
        1.0,
        ge=0,
        le=3600,
        description="Seconds between two live stats of a running pipeline (telemetry/stats/<pipeline>, QoS 0); "
        "0 turns them off. The runtime makes a snapshot about every 0.5 s; inline pipelines make none.",
    )

    def resolved(self, base: Path) -> AgentConfig:
        """A copy whose relative paths, the broker's too, are made absolute against `base` (the config file's folder)."""

        def fix(path: Path | None) -> Path | None:
            return None if path is None or path.is_absolute() else (base / path).resolve()

        update: dict[str, object] = {}
        for name in ("store_dir", "trusted_keys_dir", "profile_dir", "engine_cache_dir"):
            fixed = fix(getattr(self, name))
            if fixed is not None:
                update[name] = fixed
        update["broker"] = resolve_broker_paths(self.broker, base)
        return self.model_copy(update=update)


def load_agent_config(path: Path) -> AgentConfig:
    """Read and validate `agent.yaml`; relative paths are taken from the file's folder."""
    if not path.is_file():
        raise ConfigError(f"{path}: expected an agent config file, found none")
    return load_yaml_model(path, AgentConfig).resolved(path.resolve().parent)
