"""`edge-sdk fleet init | manifest`: an example fleet to start from, and a deployment file's artifact facts.

`init` writes certificates, the broker config, the operator's, a device's and cloud offload workers'
settings and a first deployment (fleet/operator/example_fleet.py); `manifest` computes the artifacts' sizes, SHA-256 and
chunk counts from their files (fleet/operator/manifest_builder.py). docs/fleet.md walks through both.
"""

from __future__ import annotations

from pathlib import Path

import click

from edge_sdk.fleet.operator.example_fleet import DEFAULT_PORT, DEFAULT_WORKERS, PIPELINE_NAME, write_example_fleet
from edge_sdk.fleet.operator.manifest_builder import DEFAULT_VALID_DAYS, update_deployment_file

from .fleet_group import fleet


@fleet.command("init")
@click.argument("folder", metavar="DIR", type=click.Path(path_type=Path, dir_okay=True, file_okay=False))
@click.option("--device", default="cam-001", show_default=True, help="The device's id (its certificate's name).")
@click.option("--operator", default="operator", show_default=True, help="The operator's MQTT identity.")
@click.option(
    "--worker",
    "workers",
    multiple=True,
    default=DEFAULT_WORKERS,
    show_default=True,
    help="A cloud offload worker's MQTT identity (repeatable): its certificate and worker.yaml.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="The broker's name or IP, as clients dial it.")
@click.option("--port", default=DEFAULT_PORT, show_default=True, type=click.IntRange(1, 65535), help="Broker port.")
@click.option(
    "--model",
    type=click.Path(path_type=Path, dir_okay=False),
    help="ONNX model to deploy (default: the shipped person detector).",
)
@click.option("--force", is_flag=True, help="Write into DIR even when it is not empty (its files are replaced).")
def init(
    folder: Path,
    device: str,
    operator: str,
    workers: tuple[str, ...],
    host: str,
    port: int,
    model: Path | None,
    force: bool,
) -> None:
    """Write a working example fleet into DIR: CA and certificates, Mosquitto config, operator, agent and
    offload worker settings, signing key and a deployment of the demo model."""
    made = write_example_fleet(
        folder, device=device, operator=operator, workers=workers, host=host, port=port, model=model, force=force
    )
    click.echo(f"wrote an example fleet in {folder}:")
    for path, what in made.written:
        click.echo(f"  {path.relative_to(folder)}: {what}")
    click.echo("next, from that folder (each long-running command in its own terminal, or with &):")
    for line in (
        f"cd {folder}",
        "mosquitto -c broker/mosquitto.conf",
        f"edge-sdk agent --config {device}/agent.yaml",
        "edge-sdk fleet manifest release/deployment.yaml",
        "edge-sdk fleet sign release/deployment.yaml --key operator/signing.key --out release/v1.signed",
        "edge-sdk fleet deploy release/v1.signed --broker operator/operator.yaml --key operator/signing.key",
        "edge-sdk fleet ls --broker operator/operator.yaml",
    ):
        click.echo(f"  {line}")
    worker = workers[0]
    click.echo("a cloud offload worker (cloud_offload), once the broker runs, from that folder too:")
    click.echo(f"  edge-sdk offload worker --broker {worker}/worker.yaml --pipeline release/{PIPELINE_NAME}.yaml")
    click.echo("the whole walk-through, rollouts and rollback included: docs/fleet.md")


@fleet.command("manifest")
@click.argument("deployment_path", metavar="DEPLOYMENT.yaml", type=click.Path(path_type=Path, dir_okay=False))
@click.option(
    "--artifacts",
    "artifacts_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Folder holding the artifact files (default: the deployment file's folder).",
)
@click.option("--version", type=click.IntRange(min=1), help="Set the deployment's version (and created_at to now).")
@click.option("--chunk-size", type=int, help="Bytes per inline chunk (default: each source's, else 256 KiB).")
@click.option(
    "--valid-days",
    default=DEFAULT_VALID_DAYS,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="expires_at, when it is written: this many days after created_at.",
)
def manifest(
    deployment_path: Path, artifacts_dir: Path | None, version: int | None, chunk_size: int | None, valid_days: float
) -> None:
    """Write each artifact's size, sha256 and chunk_count into DEPLOYMENT.yaml, computed from its file."""
    document, facts = update_deployment_file(
        deployment_path, artifacts_dir, version=version, chunk_size=chunk_size, valid_days=valid_days
    )
    for fact in facts:
        chunks = f", {fact.chunk_count} chunk(s)" if fact.chunk_count is not None else ""
        click.echo(f"  {fact.name} ({fact.kind}): {fact.size} bytes, sha256 {fact.sha256[:16]}…{chunks}")
    click.echo(
        f"updated {deployment_path}: deployment '{document.deployment_id}' version {document.version}, "
        f"{len(facts)} artifact(s), expires {document.expires_at.isoformat(timespec='seconds')}"
    )
