"""Fleet control: signed deployments, the device agent, and the operator's staged rollouts.

Operator side: `FleetOperator` (registry, commands, desired state), `create_rollout` + `RolloutRunner`
(staged rollout with abort threshold and per-device rollback), `RolloutStore` (SQLite), `load_broker_file`
(broker settings whose relative paths start from the file's folder). Device side:
`Agent` with its `AgentConfig` (imported on first use: it brings in the engines and pipelines).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from edge_sdk.fleet.device.artifacts import ArtifactStore
from edge_sdk.fleet.device.staging import ArtifactWriter, Staging
from edge_sdk.fleet.operator.rollout import RolloutRunner
from edge_sdk.fleet.operator.rollout_plan import create_rollout, select_targets
from edge_sdk.fleet.operator.rollout_rollback import device_rollback_manifest, roll_back_device, roll_back_rollout
from edge_sdk.fleet.operator.rollout_store import Outcome, RolloutRecord, RolloutSpec, RolloutState, RolloutStore
from edge_sdk.fleet.wire.artifact_files import sha256_file
from edge_sdk.fleet.wire.broker_file import load_broker_file, resolve_broker_paths
from edge_sdk.fleet.wire.chunks import (
    Chunk,
    ChunkAssembler,
    ChunkData,
    ChunkOutcome,
    decode_chunk,
    encode_chunk,
    inline_artifact,
    iter_chunks,
)
from edge_sdk.fleet.wire.manifest import (
    Artifact,
    DeploymentManifest,
    DeviceIdentity,
    HealthCheck,
    InlineSource,
    TargetSelector,
    UrlSource,
    decode_manifest,
    safe_artifact_name,
)
from edge_sdk.fleet.wire.signing import (
    KeyPairFiles,
    SignedManifest,
    generate_signing_key,
    key_id,
    load_private_key,
    load_public_key,
    load_trusted_keys,
    sign_manifest,
    verify_manifest,
)
from edge_sdk.fleet.wire.versions import VersionState

from .operator.client import DeviceRecord, FleetOperator

if TYPE_CHECKING:
    from edge_sdk.fleet.device.agent import Agent
    from edge_sdk.fleet.device.agent_config import AgentConfig, load_agent_config
    from edge_sdk.fleet.device.agent_service import run_agent

_LAZY = {
    "Agent": ".device.agent",
    "run_agent": ".device.agent_service",
    "AgentConfig": ".device.agent_config",
    "load_agent_config": ".device.agent_config",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "Agent",
    "AgentConfig",
    "Artifact",
    "ArtifactStore",
    "ArtifactWriter",
    "Chunk",
    "ChunkAssembler",
    "ChunkData",
    "ChunkOutcome",
    "DeploymentManifest",
    "DeviceIdentity",
    "DeviceRecord",
    "FleetOperator",
    "HealthCheck",
    "InlineSource",
    "KeyPairFiles",
    "Outcome",
    "RolloutRecord",
    "RolloutRunner",
    "RolloutSpec",
    "RolloutState",
    "RolloutStore",
    "SignedManifest",
    "Staging",
    "TargetSelector",
    "UrlSource",
    "VersionState",
    "create_rollout",
    "decode_chunk",
    "decode_manifest",
    "device_rollback_manifest",
    "encode_chunk",
    "generate_signing_key",
    "inline_artifact",
    "iter_chunks",
    "key_id",
    "load_agent_config",
    "load_broker_file",
    "load_private_key",
    "load_public_key",
    "load_trusted_keys",
    "resolve_broker_paths",
    "roll_back_device",
    "roll_back_rollout",
    "run_agent",
    "safe_artifact_name",
    "select_targets",
    "sha256_file",
    "sign_manifest",
    "verify_manifest",
]
