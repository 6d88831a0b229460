"""The agent's deploy path without a broker: chunks, staging, engine build, health check, activation, refusals."""

from __future__ import annotations

import functools
import json
import shutil
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from edge_sdk.engines.cache import EngineCache
from edge_sdk.fleet.device.artifacts import ArtifactStore
from edge_sdk.fleet.device.deploy import Deployer, DeployResult
from edge_sdk.fleet.wire.manifest import DeviceIdentity
from edge_sdk.profiles import DeviceProfile
from tests.fleet.conftest import Keys, flip_byte
from tools.harness.deployments import DEVICE_ID, PROFILE, Deployment, make_deployment, make_rollback


@pytest.fixture
def deployer(tmp_path: Path, operator_keys: Keys, cpu_profile: DeviceProfile, engine_cache: EngineCache) -> Deployer:
    return Deployer(
        ArtifactStore(tmp_path / "store"),
        [operator_keys.public],
        identity=lambda: DeviceIdentity(DEVICE_ID, PROFILE, {}),
        profile=lambda: cpu_profile,
        now=lambda: datetime.now(timezone.utc),
        cache=engine_cache,
    )


def send_all(deployer: Deployer, deployment: Deployment) -> DeployResult:
    """deploy -> need_chunks -> every chunk -> deploy again."""
    first = deployer.deploy(deployment.signed)
    assert first.status == "need_chunks", f"expected need_chunks first, got {first}"
    assert set(first.missing) == set(deployment.files)
    for suffix, payload in deployment.chunks():
        version, name = suffix.split("/")
        deployer.accept_chunk(int(version), name, payload)
    return deployer.deploy(deployment.signed)


def test_deploy_when_all_chunks_arrive_and_health_passes_then_version_active(
    deployer: Deployer, tmp_path: Path, operator_keys: Keys
) -> None:
    result = send_all(deployer, make_deployment(tmp_path, operator_keys.private, 1))
    assert result.status == "active", result.message
    assert deployer.store.current_version() == 1
    assert result.facts["health_check"] == "passed"
    again = deployer.deploy(make_deployment(tmp_path, operator_keys.private, 1).signed)
    assert again.status in ("active", "refused"), "a second deploy of the active version must not reinstall"


def test_deploy_when_same_envelope_sent_again_then_idempotent_active(
    deployer: Deployer, tmp_path: Path, operator_keys: Keys
) -> None:
    deployment = make_deployment(tmp_path, operator_keys.private, 1)
    send_all(deployer, deployment)
    again = deployer.deploy(deployment.signed)
    assert (again.status, again.version) == ("active", 1)


def test_deploy_when_chunks_partly_sent_then_missing_lists_only_the_rest(
    deployer: Deployer, tmp_path: Path, operator_keys: Keys
) -> None:
    deployment = make_deployment(tmp_path, operator_keys.private, 1)
    deployer.deploy(deployment.signed)
    chunks = deployment.chunks()
    model_chunks = [c for c in chunks if c[0].endswith("classifier.onnx")]
    version, name = model_chunks[0][0].split("/")
    deployer.accept_chunk(int(version), name, model_chunks[0][1])
    result = deployer.deploy(deployment.signed)
    assert result.status == "need_chunks"
    assert result.missing["classifier.onnx"][0][0] == 1, f"chunk 0 arrived, expected the rest: {result.missing}"


def test_deploy_when_health_check_output_differs_then_rolled_back_to_previous(
    deployer: Deployer, tmp_path: Path, operator_keys: Keys
) -> None:
    send_all(deployer, make_deployment(tmp_path, operator_keys.private, 1))
    bad = make_deployment(tmp_path / "bad", operator_keys.private, 2, expected_offset=0.5)
    result = send_all(deployer, bad)
    assert result.status == "health_failed" and result.outcome == "rolled_back"
    assert result.active_version == 1 and deployer.store.current_version() == 1
    assert "logits" in (result.message or "") and "kept version 1" in (result.message or "")
    assert 2 not in deployer.store.versions(), "a version that failed its check must not stay installable"


def test_deploy_when_activation_hook_fails_then_previous_version_runs(
    deployer: Deployer, tmp_path: Path, operator_keys: Keys
) -> None:
    send_all(deployer, make_deployment(tmp_path, operator_keys.private, 1))

    def broken(version: int) -> None:
        raise RuntimeError("pipeline did not start")

    deployer._on_activated = broken
    result = send_all(deployer, make_deployment(tmp_path / "v2", operator_keys.private, 2))
    assert result.status == "activation_failed" and result.active_version == 1
    assert deployer.store.current_version() == 1


def _refusal_cases(tmp_path: Path, keys: Keys, stranger: Keys) -> dict[str, bytes]:
    now = datetime.now(timezone.utc)
    good = make_deployment(tmp_path / "good", keys.private, 2)
    envelope = json.loads(good.signed)
    tampered = json.loads(good.signed)
    tampered["manifest"] = tampered["manifest"].replace('"version":2', '"version":3')
    return {
        "unsigned": json.dumps({k: v for k, v in envelope.items() if k != "signature"}).encode(),
        "bad-signature": json.dumps(tampered).encode(),
        "bad-signature-flip": flip_byte(good.signed, good.signed.index(b'"signature":"') + 20),
        "untrusted-key": make_deployment(tmp_path / "s", stranger.private, 2).signed,
        "expired": make_deployment(
            tmp_path / "e",
            keys.private,
            2,
            created_at=(now - timedelta(days=3)).isoformat(),
            expires_at=(now - timedelta(days=1)).isoformat(),
        ).signed,
        "wrong-target": make_deployment(tmp_path / "t", keys.private, 2, target={"device_ids": ["cam-b"]}).signed,
        "replay": make_deployment(tmp_path / "r", keys.private, 1).signed,
        "malformed": b"{not json",
    }


def test_deploy_when_manifest_forged_tampered_expired_replayed_or_mistargeted_then_refused_and_version_kept(
    deployer: Deployer, tmp_path: Path, operator_keys: Keys, stranger_keys: Keys
) -> None:
    first = make_deployment(tmp_path / "v1", operator_keys.private, 1)
    send_all(deployer, first)
    for case, signed in _refusal_cases(tmp_path, operator_keys, stranger_keys).items():
        result = deployer.deploy(signed)
        assert result.status == "refused", f"{case}: expected a refusal, got {result}"
        assert result.active_version == 1 and deployer.store.current_version() == 1, f"{case} changed the version"
        assert deployer.pending_versions() == [], f"{case}: nothing may be received for a refused manifest"
    assert deployer.store.versions() == [1]


def test_deploy_when_chunk_for_unknown_version_then_dropped(
    deployer: Deployer, tmp_path: Path, operator_keys: Keys
) -> None:
    deployment = make_deployment(tmp_path, operator_keys.private, 5)
    suffix, payload = deployment.chunks()[0]
    assert deployer.accept_chunk(5, suffix.split("/")[1], payload) is False
    assert not any((deployer.store.root / "transfers").iterdir())


def test_rollback_when_signed_rollback_to_kept_version_then_it_is_active(
    deployer: Deployer, tmp_path: Path, operator_keys: Keys
) -> None:
    first = make_deployment(tmp_path / "v1", operator_keys.private, 1)
    send_all(deployer, first)
    second = make_deployment(tmp_path / "v2", operator_keys.private, 2)
    send_all(deployer, second)
    rollback = make_rollback(operator_keys.private, first)
    result = deployer.deploy(rollback)
    assert (result.status, deployer.store.current_version()) == ("active", 1), result.message
    assert deployer.deploy(rollback).status == "active", "a resent rollback is answered, not refused"
    replayed = deployer.deploy(second.signed)
    assert replayed.status == "refused" and replayed.detail == "replay", "v2 was superseded by the rollback"
    assert deployer.store.current_version() == 1


def test_deploy_when_rollback_required_but_manifest_is_a_deployment_then_refused(
    deployer: Deployer, tmp_path: Path, operator_keys: Keys
) -> None:
    result = deployer.deploy(make_deployment(tmp_path, operator_keys.private, 1).signed, require_rollback=True)
    assert (result.status, result.detail) == ("refused", "rollback-unavailable")
    assert deployer.store.current_version() is None


@pytest.fixture
def http_folder(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A folder served over plain http on 127.0.0.1 (the manifest's SHA-256 is what makes it safe)."""
    folder = tmp_path / "www"
    folder.mkdir()
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(folder))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield folder, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def url_deployment(tmp_path: Path, keys: Keys, version: int, base_url: str, www: Path) -> Deployment:
    inline = make_deployment(tmp_path / f"url{version}", keys.private, version)
    artifacts = []
    for artifact in inline.manifest.artifacts:
        shutil.copyfile(inline.files[artifact.name], www / artifact.name)
        data = artifact.model_dump(mode="json")
        data["source"] = {"type": "url", "url": f"{base_url}/{artifact.name}"}
        artifacts.append(data)
    return make_deployment(tmp_path / f"url{version}", keys.private, version, artifacts=artifacts)


def test_deploy_when_artifacts_come_from_a_url_then_downloaded_checked_and_active(
    deployer: Deployer, tmp_path: Path, operator_keys: Keys, http_folder: tuple[Path, str]
) -> None:
    www, base_url = http_folder
    result = deployer.deploy(url_deployment(tmp_path, operator_keys, 1, base_url, www).signed)
    assert (result.status, deployer.store.current_version()) == ("active", 1), result.message


def test_deploy_when_downloaded_artifact_differs_from_its_hash_then_failed_and_version_kept(
    deployer: Deployer, tmp_path: Path, operator_keys: Keys, http_folder: tuple[Path, str]
) -> None:
    www, base_url = http_folder
    deployer.deploy(url_deployment(tmp_path, operator_keys, 1, base_url, www).signed)
    second = url_deployment(tmp_path, operator_keys, 2, base_url, www)
    (www / "expected.npz").write_bytes(b"not what was signed")
    result = deployer.deploy(second.signed)
    assert result.status == "deploy_failed" and result.detail == "artifact-hash", result
    assert deployer.store.current_version() == 1 and deployer.store.versions() == [1]
