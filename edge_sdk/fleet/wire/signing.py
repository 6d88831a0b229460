"""Ed25519 signing of deployment manifests and the device-side verification that gates every deploy.

The signed form is a small JSON envelope that carries the exact signed bytes:

    {"format": "edge-sdk-signed-manifest/1", "key_id": "<sha256 of the raw public key, hex>",
     "manifest": "<canonical manifest JSON, as a string>", "signature": "<Ed25519 signature, hex>"}

The signature covers a fixed domain prefix followed by the manifest bytes, so a fleet key's
signature over a manifest can never be taken for a signature over anything else.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from edge_sdk.core.errors import (
    ManifestExpiredError,
    ManifestFormatError,
    ManifestSignatureError,
    ManifestTargetError,
    ManifestTooLargeError,
    ManifestUnsignedError,
    ManifestUntrustedKeyError,
    SigningKeyError,
)
from edge_sdk.fleet.wire.manifest import (
    DEFAULT_MAX_MANIFEST_BYTES,
    DeploymentManifest,
    DeviceIdentity,
    canonical_json,
    decode_json_object,
    decode_manifest,
)
from edge_sdk.fleet.wire.versions import VersionState

log = logging.getLogger(__name__)

SIGNED_FORMAT = "edge-sdk-signed-manifest/1"
SIGNATURE_DOMAIN = b"edge-sdk deployment manifest v1\x00"
# The manifest travels as a JSON string, where every '"' becomes '\"': allow twice its size plus the envelope.
DEFAULT_MAX_SIGNED_BYTES = 2 * DEFAULT_MAX_MANIFEST_BYTES + 1024
_ENVELOPE_KEYS = frozenset({"format", "key_id", "manifest", "signature"})
_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEX128 = re.compile(r"[0-9a-f]{128}")


@dataclass(frozen=True)
class KeyPairFiles:
    """Where `generate_signing_key` wrote a key pair, and the key id devices will see."""

    private_key: Path
    public_key: Path
    key_id: str


@dataclass(frozen=True)
class SignedManifest:
    """A manifest, the exact bytes that were signed, and the signature over them."""

    manifest: DeploymentManifest
    manifest_bytes: bytes
    key_id: str
    signature: bytes

    def to_bytes(self) -> bytes:
        """The envelope a device receives (and `verify_manifest` takes)."""
        return canonical_json(
            {
                "format": SIGNED_FORMAT,
                "key_id": self.key_id,
                "manifest": self.manifest_bytes.decode("ascii"),
                "signature": self.signature.hex(),
            }
        )


def key_id(public_key: Ed25519PublicKey) -> str:
    """SHA-256 (hex) of the 32 raw public key bytes: the name devices and operators use for a key."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def generate_signing_key(out_dir: Path, name: str = "fleet-signing", overwrite: bool = False) -> KeyPairFiles:
    """Write `<name>.key` (PKCS#8 PEM, mode 0600) and `<name>.pub` (PEM) into `out_dir`."""
    private_path = out_dir / f"{name}.key"
    public_path = out_dir / f"{name}.pub"
    if not overwrite:
        for path in (private_path, public_path):
            if path.exists() or path.is_symlink():
                raise SigningKeyError(f"{path}: already exists; refusing to overwrite a key (expected a new path)")
    try:
        out_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise SigningKeyError(f"{out_dir}: cannot create the key folder ({exc.strerror})") from None
    private_key = Ed25519PrivateKey.generate()
    public_key = private_key.public_key()
    private_pem = private_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public_pem = public_key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    _write_atomically(private_path, private_pem, mode=0o600)
    _write_atomically(public_path, public_pem, mode=0o644)
    return KeyPairFiles(private_path, public_path, key_id(public_key))


def load_private_key(path: Path) -> Ed25519PrivateKey:
    """Load an unencrypted Ed25519 private key from a PEM file."""
    data = _read_key_file(path)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise SigningKeyError(f"{path}: expected an unencrypted PEM private key ({exc})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SigningKeyError(f"{path}: expected an Ed25519 private key, got {type(key).__name__}")
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        log.warning("%s: private key is readable by others (mode %o); expected 0600", path, mode)
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    """Load an Ed25519 public key from a PEM file."""
    data = _read_key_file(path)
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise SigningKeyError(f"{path}: expected a PEM public key ({exc})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise SigningKeyError(f"{path}: expected an Ed25519 public key, got {type(key).__name__}")
    return key


def load_trusted_keys(paths: Iterable[Path]) -> list[Ed25519PublicKey]:
    """Public keys from files; a folder contributes every `*.pub` file in it."""
    keys: list[Ed25519PublicKey] = []
    for path in paths:
        files = sorted(path.glob("*.pub")) if path.is_dir() else [path]
        keys.extend(load_public_key(file) for file in files)
    if not keys:
        raise SigningKeyError("expected at least one trusted public key, got none")
    return keys


def sign_manifest(manifest: DeploymentManifest, private_key: Ed25519PrivateKey) -> SignedManifest:
    """Sign the manifest's canonical JSON."""
    manifest_bytes = manifest.canonical_json()
    signature = private_key.sign(SIGNATURE_DOMAIN + manifest_bytes)
    return SignedManifest(manifest, manifest_bytes, key_id(private_key.public_key()), signature)


def verify_manifest(
    signed_bytes: bytes,
    trusted_public_keys: Iterable[Ed25519PublicKey],
    device: DeviceIdentity,
    now: datetime,
    versions: VersionState,
    max_bytes: int = DEFAULT_MAX_SIGNED_BYTES,
) -> DeploymentManifest:
    """Return the manifest if this device may install it; otherwise raise the first refusal that applies.

    In order: the envelope decodes (ManifestFormatError / ManifestTooLargeError), it is signed
    (ManifestUnsignedError) by a trusted key (ManifestUntrustedKeyError) over exactly these bytes
    (ManifestSignatureError), the manifest decodes (ManifestFormatError), has not expired
    (ManifestExpiredError), selects this device (ManifestTargetError), and its version is allowed
    by `versions` (ManifestReplayError, ManifestDowngradeError, ManifestRollbackError).
    """
    if now.tzinfo is None:
        raise ValueError("verify_manifest needs an aware `now` (e.g. datetime.now(timezone.utc))")
    manifest_bytes, signer, signature = _open_envelope(signed_bytes, max_bytes)
    trusted = {key_id(key): key for key in trusted_public_keys}
    public_key = trusted.get(signer)
    if public_key is None:
        raise ManifestUntrustedKeyError(
            f"manifest is signed by key {signer[:16]}…, expected one of the trusted keys "
            f"{', '.join(sorted(k[:16] + '…' for k in trusted)) or '(none are trusted)'}"
        )
    try:
        public_key.verify(signature, SIGNATURE_DOMAIN + manifest_bytes)
    except InvalidSignature:
        raise ManifestSignatureError(
            f"signature by key {signer[:16]}… does not match the manifest bytes: tampered with or corrupted"
        ) from None
    manifest = decode_manifest(manifest_bytes, max_bytes=len(manifest_bytes))
    if manifest.is_expired(now):
        raise ManifestExpiredError(
            f"deployment '{manifest.deployment_id}' version {manifest.version} expired at "
            f"{manifest.expires_at.isoformat()}; device time is {now.isoformat()}"
        )
    why = manifest.target.mismatch(device)
    if why is not None:
        raise ManifestTargetError(
            f"deployment '{manifest.deployment_id}' version {manifest.version} is not for this device: {why}"
        )
    versions.check(manifest)
    return manifest


def _open_envelope(payload: bytes, max_bytes: int) -> tuple[bytes, str, bytes]:
    data = decode_json_object(payload, max_bytes, what="signed manifest")
    if data.get("signature") in (None, ""):
        shape = "a bare manifest" if "deployment_id" in data else f"keys {', '.join(sorted(data)[:8]) or '(none)'}"
        raise ManifestUnsignedError(f"expected a signed manifest envelope with a signature, got {shape}")
    if set(data) != _ENVELOPE_KEYS:
        raise ManifestFormatError(
            f"signed manifest: expected keys {', '.join(sorted(_ENVELOPE_KEYS))}, "
            f"got {', '.join(sorted(str(k)[:40] for k in data)[:8]) or '(none)'}"
        )
    if data["format"] != SIGNED_FORMAT:
        raise ManifestFormatError(
            f"signed manifest: expected format '{SIGNED_FORMAT}', got {str(data['format'])[:60]!r}"
        )
    signer, signature, manifest = data["key_id"], data["signature"], data["manifest"]
    if not isinstance(signer, str) or not _HEX64.fullmatch(signer):
        raise ManifestFormatError("signed manifest: expected key_id as 64 lowercase hex digits")
    if not isinstance(signature, str) or not _HEX128.fullmatch(signature):
        raise ManifestFormatError("signed manifest: expected signature as 128 lowercase hex digits")
    if not isinstance(manifest, str):
        raise ManifestFormatError(f"signed manifest: expected manifest as a string, got {type(manifest).__name__}")
    # surrogatepass: a non-ASCII manifest was not made by sign_manifest; let the signature check refuse it.
    manifest_bytes = manifest.encode("utf-8", errors="surrogatepass")
    if len(manifest_bytes) > DEFAULT_MAX_MANIFEST_BYTES:
        raise ManifestTooLargeError(
            f"manifest: expected at most {DEFAULT_MAX_MANIFEST_BYTES} bytes, got {len(manifest_bytes)}"
        )
    return manifest_bytes, signer, bytes.fromhex(signature)


def _read_key_file(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise SigningKeyError(f"{path}: key file not found") from None
    except OSError as exc:
        raise SigningKeyError(f"{path}: cannot read the key file ({exc.strerror})") from None


def _write_atomically(path: Path, data: bytes, mode: int) -> None:
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        try:
            os.fchmod(fd, mode)
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)
    except OSError as exc:
        temp.unlink(missing_ok=True)
        raise SigningKeyError(f"{path}: cannot write the key file ({exc.strerror})") from None
