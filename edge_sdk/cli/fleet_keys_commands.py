"""`edge-sdk fleet keygen | sign`: the operator's signing key and signed deployment manifests.

Importing it also registers `fleet init | manifest` (fleet_init_commands), the deployment file's other tools.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from edge_sdk.core.errors import ConfigError
from edge_sdk.fleet.operator.deployment_file import load_deployment
from edge_sdk.fleet.wire.manifest import safe_artifact_name
from edge_sdk.fleet.wire.signing import generate_signing_key, load_private_key, sign_manifest

from . import fleet_init_commands  # noqa: F401  (registers fleet init and fleet manifest)
from .fleet_group import fleet


@fleet.command("keygen")
@click.option(
    "--out", "out_dir", required=True, type=click.Path(path_type=Path, file_okay=False), help="Folder for the keys."
)
@click.option("--name", default="fleet-signing", show_default=True, help="File name stem of the key pair.")
@click.option("--force", is_flag=True, help="Overwrite an existing key pair of that name.")
def keygen(out_dir: Path, name: str, force: bool) -> None:
    """Make an Ed25519 key pair: NAME.key (private, mode 0600) and NAME.pub (give this one to devices)."""
    try:
        safe_artifact_name(name)
    except ValueError as exc:
        raise ConfigError(f"--name: {exc}") from None
    files = generate_signing_key(out_dir, name, overwrite=force)
    click.echo(f"private key: {files.private_key} (keep it secret)")
    click.echo(f"public key:  {files.public_key} (install on devices as a trusted key)")
    click.echo(f"key id:      {files.key_id}")


@fleet.command("sign")
@click.argument("manifest_path", metavar="MANIFEST.yaml", type=click.Path(path_type=Path, dir_okay=False))
@click.option(
    "--key", "key_path", required=True, type=click.Path(path_type=Path, dir_okay=False), help="Private key file."
)
@click.option(
    "--out",
    "out_path",
    required=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="Signed manifest to write.",
)
@click.option(
    "--artifacts",
    "artifacts_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Folder of the inline artifacts, checked against the manifest (default: the manifest's folder).",
)
def sign(manifest_path: Path, key_path: Path, out_path: Path, artifacts_dir: Path | None) -> None:
    """Check a deployment manifest (YAML) and write it signed, ready to send to devices.

    Every problem is listed at once, with its line; inline artifacts must be present beside the file (or
    in --artifacts) with the manifest's size and SHA-256 (`fleet manifest` writes them).
    """
    manifest = load_deployment(manifest_path, artifacts_dir)
    signed = sign_manifest(manifest, load_private_key(key_path))
    _write(out_path, signed.to_bytes())
    click.echo(
        f"signed deployment '{manifest.deployment_id}' version {manifest.version} with key {signed.key_id[:16]}… "
        f"-> {out_path}"
    )


def _write(path: Path, data: bytes) -> None:
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        temp.write_bytes(data)
        os.replace(temp, path)
    except OSError as exc:
        temp.unlink(missing_ok=True)
        raise ConfigError(f"{path}: cannot write the signed manifest ({exc.strerror})") from None
