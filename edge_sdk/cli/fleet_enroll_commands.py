"""`edge-sdk fleet enroll serve | list | approve | reject | revoke`: the operator's side of enrollment by claim."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import click

from edge_sdk.core.errors import ConfigError
from edge_sdk.fleet.operator.enrollment import EnrollmentService, load_ca
from edge_sdk.fleet.operator.enrollment_policy import load_policy
from edge_sdk.fleet.operator.enrollment_store import EnrollmentStore
from edge_sdk.fleet.wire.broker_file import load_broker_file
from edge_sdk.mqtt import MqttClient

from .fleet_group import fleet
from .fleet_options import broker_option


def _state_option(command: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--state",
        "state_dir",
        default=Path("enrollment"),
        show_default=True,
        type=click.Path(path_type=Path, file_okay=False),
        help="Folder of the enrollment store (enrollment.db: requests, states, certificates issued).",
    )(command)


@fleet.group("enroll")
def enroll() -> None:
    """Enrollment by claim: serve boxes' requests, list them, approve, reject or revoke serials."""


@enroll.command("serve")
@broker_option
@click.option(
    "--ca-dir",
    required=True,
    type=click.Path(path_type=Path, file_okay=False),
    help="Folder with the fleet CA's ca.pem and ca.key (make_certs.py's output folder).",
)
@_state_option
@click.option("--auto", is_flag=True, help="Sign requests that meet --policy without an operator.")
@click.option("--policy", "policy_file", type=click.Path(path_type=Path, dir_okay=False), help="Policy YAML.")
@click.option("--days", default=825, show_default=True, help="Certificate validity without a policy.")
def serve(broker_file: Path, ca_dir: Path, state_dir: Path, auto: bool, policy_file: Path | None, days: int) -> None:
    """Answer enrollment requests until stopped (Ctrl-C or SIGTERM)."""
    if auto and policy_file is None:
        raise ConfigError("--auto needs --policy")
    policy = load_policy(policy_file) if auto and policy_file is not None else None
    ca = load_ca(ca_dir)
    store = EnrollmentStore(state_dir)
    client = MqttClient(load_broker_file(broker_file))
    client.connect()
    service = EnrollmentService(client, ca, store, policy, days=days)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        service.stop()

    signal.signal(signal.SIGTERM, on_signal)
    try:
        service.start()
        click.echo(f"serving enrollment requests ({'auto, policy ' + str(policy_file) if policy else 'manual'})")
        service.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        client.disconnect(flush_timeout=5.0)
    click.echo(f"signed {service.signed} certificate(s)")


@enroll.command("list")
@_state_option
@click.option("--json", "as_json", is_flag=True, help="JSON instead of a table.")
def list_requests(state_dir: Path, as_json: bool) -> None:
    """Serials that asked to enroll: state (pending, approved, enrolled, rejected, revoked), device id, facts."""
    records = EnrollmentStore(state_dir).records()
    if as_json:
        click.echo(json.dumps([record.__dict__ for record in records], indent=2))
        return
    if not records:
        click.echo("no enrollment requests")
        return
    for r in records:
        labels = ",".join(f"{k}={v}" for k, v in sorted(r.facts.get("labels", {}).items()))
        line = f"{r.serial:<24} {r.state:<9} {r.device_id or '-':<20} {r.claim or '-':<16} {labels or '-'}"
        click.echo(line + (f"  ({r.reason})" if r.reason else ""))


@enroll.command("approve")
@click.argument("serial")
@_state_option
@click.option("--re-enroll", is_flag=True, help="Allow a serial that is enrolled already to get a new certificate.")
def approve(serial: str, state_dir: Path, re_enroll: bool) -> None:
    """Approve SERIAL's request; the running `fleet enroll serve` signs it and answers the box."""
    click.echo(f"{serial}: {EnrollmentStore(state_dir).approve(serial, re_enroll)}")


@enroll.command("reject")
@click.argument("serial")
@_state_option
def reject(serial: str, state_dir: Path) -> None:
    """Refuse SERIAL's pending request (a later request waits again)."""
    EnrollmentStore(state_dir).reject(serial)
    click.echo(f"{serial}: rejected")


@enroll.command("revoke")
@click.argument("serial")
@_state_option
def revoke(serial: str, state_dir: Path) -> None:
    """Refuse SERIAL for good: its requests are refused from now on (its certificate stays valid until the
    broker's CRL or a CA rotation says otherwise: deploy/mosquitto/README.md)."""
    EnrollmentStore(state_dir).revoke(serial)
    click.echo(f"{serial}: revoked")
