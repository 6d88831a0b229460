"""Signed manifests: every way a deployment can be forged, stale or misdirected is refused on its own terms,
and the device keeps running the version it had."""

from __future__ import annotations

import hashlib
import json
import re
import stat
from datetime import timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_sdk.core.errors import (
    ManifestDowngradeError,
    ManifestError,
    ManifestExpiredError,
    ManifestFormatError,
    ManifestReplayError,
    ManifestRollbackError,
    ManifestSignatureError,
    ManifestTargetError,
    ManifestTooLargeError,
    ManifestUnsignedError,
    ManifestUntrustedKeyError,
    SigningKeyError,
)
from edge_sdk.fleet.device.artifacts import ArtifactStore
from edge_sdk.fleet.wire.signing import (
    SIGNED_FORMAT,
    generate_signing_key,
    key_id,
    load_private_key,
    load_public_key,
    load_trusted_keys,
    sign_manifest,
    verify_manifest,
)
from edge_sdk.fleet.wire.versions import VersionState

from .conftest import DEVICE, NOW, Deploy, Keys, flip_byte, make_manifest, payload_for


def signed(keys: Keys, version: int, **overrides: object) -> bytes:
    return sign_manifest(make_manifest(version, **overrides), keys.private).to_bytes()


@pytest.fixture
def running_v5(store: ArtifactStore, deploy: Deploy, operator_keys: Keys) -> ArtifactStore:
    """A device that deployed v3 and then v5: v5 is active, v3 is kept for rollback."""
    deploy(signed(operator_keys, 3))
    deploy(signed(operator_keys, 5))
    assert store.current_version() == 5
    return store


def assert_still_on_v5(store: ArtifactStore) -> None:
    assert store.current_version() == 5, "a refused manifest must leave the active version alone"
    assert store.artifact_path("detector.onnx").read_bytes() == payload_for(5), "v5's files must be untouched"
    assert store.versions() == [3, 5], "a refused manifest must not add a version"


# ---------------------------------------------------------------- keys


def test_generate_signing_key_when_run_writes_a_private_key_only_its_owner_can_read(tmp_path: Path) -> None:
    files = generate_signing_key(tmp_path / "keys")
    assert stat.S_IMODE(files.private_key.stat().st_mode) == 0o600
    assert b"PRIVATE KEY" in files.private_key.read_bytes()
    assert key_id(load_public_key(files.public_key)) == files.key_id
    assert key_id(load_private_key(files.private_key).public_key()) == files.key_id


def test_generate_signing_key_when_the_key_exists_refuses_to_overwrite_it(tmp_path: Path) -> None:
    first = generate_signing_key(tmp_path)
    with pytest.raises(SigningKeyError, match="already exists"):
        generate_signing_key(tmp_path)
    assert key_id(load_public_key(first.public_key)) == first.key_id, "the first key must survive"


def test_key_id_when_computed_is_the_sha256_of_the_raw_public_key(operator_keys: Keys) -> None:
    raw = operator_keys.public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert key_id(operator_keys.public) == hashlib.sha256(raw).hexdigest()


def test_load_private_key_when_file_holds_an_rsa_key_says_ed25519_was_expected(tmp_path: Path) -> None:
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    path = tmp_path / "rsa.key"
    path.write_bytes(
        rsa_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    with pytest.raises(SigningKeyError, match="expected an Ed25519 private key"):
        load_private_key(path)


@pytest.mark.parametrize(
    "content", [b"", b"not a key", b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"]
)
def test_load_public_key_when_file_is_not_a_key_raises_signing_key_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.pub"
    path.write_bytes(content)
    with pytest.raises(SigningKeyError, match=r"bad\.pub"):
        load_public_key(path)


def test_load_trusted_keys_when_given_a_folder_loads_every_pub_file(operator_keys: Keys, stranger_keys: Keys) -> None:
    keys = load_trusted_keys([operator_keys.folder, stranger_keys.folder])
    assert {key_id(k) for k in keys} == {key_id(operator_keys.public), key_id(stranger_keys.public)}


# ---------------------------------------------------------------- signing


def test_sign_manifest_when_signed_twice_gives_identical_bytes(operator_keys: Keys) -> None:
    assert signed(operator_keys, 2) == signed(operator_keys, 2), "canonical JSON + Ed25519 are deterministic"
    envelope = json.loads(signed(operator_keys, 2))
    assert envelope["format"] == SIGNED_FORMAT and envelope["key_id"] == key_id(operator_keys.public)


def test_verify_manifest_when_signed_by_a_trusted_key_returns_the_manifest(operator_keys: Keys) -> None:
    manifest = verify_manifest(signed(operator_keys, 1), [operator_keys.public], DEVICE, NOW, VersionState())
    assert manifest == make_manifest(1)


def test_deploy_when_a_valid_newer_manifest_arrives_activates_it_and_keeps_the_old_one(
    running_v5: ArtifactStore, deploy: Deploy, operator_keys: Keys
) -> None:
    deploy(signed(operator_keys, 6))
    assert running_v5.current_version() == 6
    assert running_v5.artifact_path("detector.onnx").read_bytes() == payload_for(6)
    assert running_v5.versions() == [3, 5, 6], "earlier versions stay on disk for rollback"


# ---------------------------------------------------------------- refusals


def test_deploy_when_one_byte_of_the_manifest_is_changed_refuses_a_bad_signature(
    running_v5: ArtifactStore, deploy: Deploy, operator_keys: Keys
) -> None:
    payload = signed(operator_keys, 6)
    tampered = payload.replace(b'\\"version\\":6', b'\\"version\\":7')
    assert len(tampered) == len(payload) and sum(a != b for a, b in zip(payload, tampered, strict=True)) == 1
    with pytest.raises(ManifestSignatureError, match="does not match the manifest bytes"):
        deploy(tampered)
    assert_still_on_v5(running_v5)


def test_deploy_when_the_manifest_is_not_signed_refuses_it_as_unsigned(
    running_v5: ArtifactStore, deploy: Deploy, operator_keys: Keys
) -> None:
    with pytest.raises(ManifestUnsignedError, match="got a bare manifest"):
        deploy(make_manifest(6).canonical_json())
    envelope = json.loads(signed(operator_keys, 6))
    with pytest.raises(ManifestUnsignedError):
        deploy(json.dumps({**envelope, "signature": ""}).encode())
    assert_still_on_v5(running_v5)


def test_deploy_when_signed_by_an_untrusted_key_refuses_it(
    running_v5: ArtifactStore, deploy: Deploy, stranger_keys: Keys, operator_keys: Keys
) -> None:
    with pytest.raises(ManifestUntrustedKeyError) as caught:
        deploy(signed(stranger_keys, 6))
    message = str(caught.value)
    assert key_id(stranger_keys.public)[:16] in message, "the error names the signer"
    assert key_id(operator_keys.public)[:16] in message, "the error names the trusted keys"
    assert_still_on_v5(running_v5)


def test_deploy_when_an_untrusted_signature_claims_a_trusted_key_id_refuses_a_bad_signature(
    running_v5: ArtifactStore, deploy: Deploy, stranger_keys: Keys, operator_keys: Keys
) -> None:
    envelope = json.loads(signed(stranger_keys, 6))
    envelope["key_id"] = key_id(operator_keys.public)
    with pytest.raises(ManifestSignatureError):
        deploy(json.dumps(envelope).encode())
    assert_still_on_v5(running_v5)


def test_deploy_when_the_manifest_has_expired_refuses_it(
    running_v5: ArtifactStore, deploy: Deploy, operator_keys: Keys
) -> None:
    expired_at = NOW - timedelta(minutes=1)
    with pytest.raises(ManifestExpiredError, match=re.escape(f"expired at {expired_at.isoformat()}; device time is")):
        deploy(signed(operator_keys, 6, expires_at=expired_at.isoformat()))
    assert_still_on_v5(running_v5)


def test_deploy_when_the_same_version_is_replayed_refuses_it(
    running_v5: ArtifactStore, deploy: Deploy, operator_keys: Keys
) -> None:
    with pytest.raises(ManifestReplayError, match="version 5 is already the active version"):
        deploy(signed(operator_keys, 5))
    assert_still_on_v5(running_v5)


def test_deploy_when_a_lower_version_is_not_marked_as_rollback_refuses_a_downgrade(
    running_v5: ArtifactStore, deploy: Deploy, operator_keys: Keys
) -> None:
    with pytest.raises(ManifestDowngradeError, match="version 3 is lower than the active version 5"):
        deploy(signed(operator_keys, 3))
    assert_still_on_v5(running_v5)


def test_deploy_when_the_manifest_targets_other_devices_refuses_it(
    running_v5: ArtifactStore, deploy: Deploy, operator_keys: Keys
) -> None:
    with pytest.raises(ManifestTargetError, match="this device has profile 'x86-cpu'"):
        deploy(signed(operator_keys, 6, target={"profiles": ["jetson-orin-dla"]}))
    with pytest.raises(ManifestTargetError, match="this device is 'box-17'"):
        deploy(signed(operator_keys, 6, target={"device_ids": ["box-18"]}))
    assert_still_on_v5(running_v5)


def test_deploy_when_the_payload_is_oversized_refuses_it(running_v5: ArtifactStore, deploy: Deploy) -> None:
    with pytest.raises(ManifestTooLargeError):
        deploy(b"{" + b" " * 2_000_000 + b"}")
    assert_still_on_v5(running_v5)


def test_verify_manifest_when_several_checks_fail_reports_the_first_in_order(
    operator_keys: Keys, stranger_keys: Keys
) -> None:
    expired_elsewhere = {"expires_at": (NOW - timedelta(days=1)).isoformat(), "target": {"device_ids": ["other"]}}
    with pytest.raises(ManifestUntrustedKeyError):
        verify_manifest(
            signed(stranger_keys, 1, **expired_elsewhere), [operator_keys.public], DEVICE, NOW, VersionState()
        )
    with pytest.raises(ManifestExpiredError):
        verify_manifest(
            signed(operator_keys, 1, **expired_elsewhere), [operator_keys.public], DEVICE, NOW, VersionState()
        )
    with pytest.raises(ManifestTargetError):
        verify_manifest(
            signed(operator_keys, 1, target={"device_ids": ["other"]}),
            [operator_keys.public],
            DEVICE,
            NOW,
            VersionState(current=4),
        )


# ---------------------------------------------------------------- rollback and replay after rollback


def test_deploy_when_an_explicit_rollback_names_a_kept_version_switches_back_to_it(
    running_v5: ArtifactStore, deploy: Deploy, operator_keys: Keys
) -> None:
    deploy(signed(operator_keys, 3, rollback=True, created_at=(NOW - timedelta(hours=1)).isoformat()))
    assert running_v5.current_version() == 3
    assert running_v5.artifact_path("detector.onnx").read_bytes() == payload_for(3)


def test_deploy_when_a_rollback_names_a_version_no_longer_kept_refuses_it(
    running_v5: ArtifactStore, deploy: Deploy, operator_keys: Keys
) -> None:
    with pytest.raises(
        ManifestRollbackError, match=r"version 2: that version is no longer on this device; expected one of 3, 5$"
    ):
        deploy(signed(operator_keys, 2, rollback=True, created_at=(NOW - timedelta(hours=1)).isoformat()))
    assert_still_on_v5(running_v5)


def test_deploy_when_a_rollback_names_a_higher_version_refuses_it(
    running_v5: ArtifactStore, deploy: Deploy, operator_keys: Keys
) -> None:
    with pytest.raises(ManifestRollbackError, match="expected a version below the active version 5"):
        deploy(signed(operator_keys, 6, rollback=True, created_at=(NOW - timedelta(hours=1)).isoformat()))
    assert_still_on_v5(running_v5)


def test_deploy_when_a_captured_rollback_is_replayed_later_refuses_it(
    running_v5: ArtifactStore, deploy: Deploy, operator_keys: Keys
) -> None:
    # given: a rollback to v3 that was created before v5's manifest
    old_rollback = signed(operator_keys, 3, rollback=True)
    # then
    with pytest.raises(ManifestReplayError, match="a replayed rollback"):
        deploy(old_rollback)
    assert_still_on_v5(running_v5)


def test_deploy_when_an_older_version_is_replayed_after_a_rollback_refuses_it(
    running_v5: ArtifactStore, deploy: Deploy, operator_keys: Keys
) -> None:
    # given: v3 -> v5, then the operator rolls back to v3
    deploy(signed(operator_keys, 3, rollback=True, created_at=(NOW - timedelta(hours=1)).isoformat()))
    # when: someone replays a captured, validly signed v4 manifest
    with pytest.raises(ManifestReplayError, match="expected a version above 5"):
        deploy(signed(operator_keys, 4))
    # then: v3 stays active, and a genuinely new version is still accepted
    assert running_v5.current_version() == 3
    deploy(signed(operator_keys, 6))
    assert running_v5.current_version() == 6


# ---------------------------------------------------------------- fuzzing


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_verify_manifest_when_any_single_byte_is_changed_refuses_with_a_manifest_error(
    operator_keys: Keys, data: st.DataObject
) -> None:
    payload = signed(operator_keys, 6)
    index = data.draw(st.integers(0, len(payload) - 1), label="index")
    value = data.draw(st.integers(0, 255).filter(lambda v: v != payload[index]), label="value")
    tampered = payload[:index] + bytes([value]) + payload[index + 1 :]
    with pytest.raises(ManifestError):
        verify_manifest(tampered, [operator_keys.public], DEVICE, NOW, VersionState(current=5))


def test_verify_manifest_when_each_byte_is_flipped_in_turn_never_accepts(operator_keys: Keys) -> None:
    payload = signed(operator_keys, 6)
    accepted = []
    for index in range(len(payload)):
        try:
            verify_manifest(flip_byte(payload, index), [operator_keys.public], DEVICE, NOW, VersionState(current=5))
            accepted.append(index)
        except ManifestError:
            pass
    assert accepted == [], f"a one-bit change at these offsets was accepted: {accepted}"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2048))
def test_verify_manifest_when_given_random_bytes_raises_only_manifest_errors(
    operator_keys: Keys, payload: bytes
) -> None:
    with pytest.raises(ManifestError):
        verify_manifest(payload, [operator_keys.public], DEVICE, NOW, VersionState())


def test_verify_manifest_when_envelope_has_extra_keys_raises_format_error(operator_keys: Keys) -> None:
    envelope = json.loads(signed(operator_keys, 1))
    with pytest.raises(ManifestFormatError, match="expected keys"):
        verify_manifest(json.dumps({**envelope, "x": 1}).encode(), [operator_keys.public], DEVICE, NOW, VersionState())
