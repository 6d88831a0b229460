"""Signed deployments of the tiny float classifier with a real health check, for the agent's tests and the fleet bench."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from edge_sdk.fleet.wire.chunks import encode_chunk, inline_artifact, iter_chunks
from edge_sdk.fleet.wire.manifest import DeploymentManifest
from edge_sdk.fleet.wire.signing import sign_manifest
from tools.harness.onnx_models import float_classifier

CHUNK_SIZE = 1024
DEVICE_ID = "cam-a"
PROFILE = "x86-cpu"


@dataclass(frozen=True)
class Deployment:
    """A signed envelope and the files (name -> path) its inline artifacts are cut from."""

    manifest: DeploymentManifest
    signed: bytes
    files: dict[str, Path]

    def chunks(self) -> list[tuple[str, bytes]]:
        """(topic suffix `<version>/<name>`, chunk message) for every chunk of every inline artifact."""
        messages = []
        for artifact in self.manifest.artifacts:
            count = artifact.source.chunk_count  # type: ignore[union-attr]
            for index, data, _ in iter_chunks(self.files[artifact.name], CHUNK_SIZE):
                payload = encode_chunk(self.manifest.version, artifact.name, index, count, data)
                messages.append((f"{self.manifest.version}/{artifact.name}", payload))
        return messages


def model_files(folder: Path, expected_offset: float = 0.0) -> dict[str, Path]:
    """classifier.onnx, sample.npz and expected.npz (ONNX Runtime's answer, shifted by `expected_offset`)."""
    folder.mkdir(parents=True, exist_ok=True)
    model = float_classifier(folder / "classifier.onnx")
    images = np.random.default_rng(3).standard_normal((1, 3, 8, 8)).astype(np.float32)
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    (logits,) = session.run(None, {"images": images})
    np.savez(folder / "sample.npz", images=images)
    np.savez(folder / "expected.npz", logits=logits + np.float32(expected_offset))
    return {"classifier.onnx": model, "sample.npz": folder / "sample.npz", "expected.npz": folder / "expected.npz"}


def make_deployment(
    folder: Path,
    key: Ed25519PrivateKey,
    version: int,
    *,
    expected_offset: float = 0.0,
    now: datetime | None = None,
    pipeline: str | None = None,
    **overrides: Any,
) -> Deployment:
    """A signed deployment of the classifier with its health check (for DEVICE_ID on PROFILE by default).

    `pipeline` adds a pipeline artifact `people.yaml` with that text.
    """
    now = now or datetime.now(timezone.utc)
    files = model_files(folder / f"v{version}", expected_offset)
    kinds = {"classifier.onnx": "model", "sample.npz": "file", "expected.npz": "file", "people.yaml": "pipeline"}
    if pipeline is not None:
        files["people.yaml"] = folder / f"v{version}" / "people.yaml"
        files["people.yaml"].write_text(pipeline)
    data: dict[str, Any] = {
        "deployment_id": f"classifier-{version}",
        "version": version,
        "created_at": (now - timedelta(minutes=10) + timedelta(seconds=version)).isoformat(),
        "expires_at": (now + timedelta(days=1)).isoformat(),
        "target": {"device_ids": [DEVICE_ID], "profiles": [PROFILE]},
        "artifacts": [
            inline_artifact(path, kinds[name], CHUNK_SIZE).model_dump(mode="json") for name, path in files.items()
        ],
        "health_check": {"sample_input": "sample.npz", "expected_output": "expected.npz", "atol": 1e-4},
    }
    data.update(overrides)
    manifest = DeploymentManifest.model_validate(data)
    return Deployment(manifest, sign_manifest(manifest, key).to_bytes(), files)


def make_rollback(key: Ed25519PrivateKey, of: Deployment, now: datetime | None = None) -> bytes:
    """A signed rollback manifest to `of`'s version, created now (after every manifest activated before)."""
    now = now or datetime.now(timezone.utc)
    data = of.manifest.model_dump(mode="json")
    data.update(
        deployment_id=f"rollback-{of.manifest.version}",
        rollback=True,
        created_at=now.isoformat(),
        expires_at=(now + timedelta(days=1)).isoformat(),
    )
    return sign_manifest(DeploymentManifest.model_validate(data), key).to_bytes()
