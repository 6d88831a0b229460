"""Fleet control: signed deployment manifests, the device's artifact store and chunked transfers."""

from __future__ import annotations

from .artifacts import ArtifactStore
from .chunks import (
    Chunk,
    ChunkAssembler,
    ChunkData,
    ChunkOutcome,
    decode_chunk,
    encode_chunk,
    inline_artifact,
    iter_chunks,
)
from .manifest import (
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
from .signing import (
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
from .staging import ArtifactWriter, Staging, sha256_file
from .versions import VersionState

__all__ = [
    "Artifact",
    "ArtifactStore",
    "ArtifactWriter",
    "Chunk",
    "ChunkAssembler",
    "ChunkData",
    "ChunkOutcome",
    "DeploymentManifest",
    "DeviceIdentity",
    "HealthCheck",
    "InlineSource",
    "KeyPairFiles",
    "SignedManifest",
    "Staging",
    "TargetSelector",
    "UrlSource",
    "VersionState",
    "decode_chunk",
    "decode_manifest",
    "encode_chunk",
    "generate_signing_key",
    "inline_artifact",
    "iter_chunks",
    "key_id",
    "load_private_key",
    "load_public_key",
    "load_trusted_keys",
    "safe_artifact_name",
    "sha256_file",
    "sign_manifest",
    "verify_manifest",
]
