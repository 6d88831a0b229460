"""`edge-sdk device enroll`: trade the box's claim certificate for its own device certificate (docs/enrollment.md)."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from types import FrameType

import click

from edge_sdk.fleet.device.agent_config import load_agent_config
from edge_sdk.fleet.device.enrollment import DEFAULT_STATE_FILE, Enroller, EnrollmentOptions, read_serial

from .device_group import device

__all__ = ["device"]


@device.command("enroll")
@click.option(
    "--config",
    "config_file",
    default=Path("/etc/edge-sdk/agent.yaml"),
    show_default=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="The agent's config: device_id, broker, and broker.tls (ca_file trusted; key_file and cert_file written).",
)
@click.option(
    "--claim-cert",
    default=Path("/etc/edge-sdk/tls/claim.pem"),
    show_default=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="The claim certificate shipped with the box.",
)
@click.option(
    "--claim-key",
    default=Path("/etc/edge-sdk/tls/claim.key"),
    show_default=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="The claim certificate's key.",
)
@click.option("--serial", help="The box's serial; default: the device tree's serial-number, else /etc/machine-id.")
@click.option(
    "--state",
    "state_file",
    default=DEFAULT_STATE_FILE,
    show_default=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="Where the enrollment's progress is written (read by `edge-sdk device status`).",
)
@click.option("--timeout", "timeout_s", default=30.0, show_default=True, help="Seconds to wait for an answer.")
@click.option("--max-backoff", "max_backoff_s", default=300.0, show_default=True, help="Longest wait between attempts.")
@click.option("--once", is_flag=True, help="One attempt, no retries (exit 1 unless enrolled).")
def enroll(
    config_file: Path,
    claim_cert: Path,
    claim_key: Path,
    serial: str | None,
    state_file: Path,
    timeout_s: float,
    max_backoff_s: float,
    once: bool,
) -> None:
    """Enroll this box: make its key and CSR, send them with the claim certificate, install the certificate.

    Retries with exponential backoff (up to --max-backoff) while the broker is unreachable or the request
    waits for an operator; does nothing when the box's certificate is already in place.
    """
    config = load_agent_config(config_file)
    options = EnrollmentOptions(
        claim_cert=claim_cert,
        claim_key=claim_key,
        serial=serial or read_serial(),
        state_file=state_file,
        response_timeout_s=timeout_s,
        max_backoff_s=max_backoff_s,
    )
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    enroller = Enroller(config, options, sleep=lambda seconds: not stop.wait(seconds))
    if not enroller.run(once=once):
        status = enroller.status
        raise click.ClickException(f"not enrolled ({status.state}): {status.last_error}")
    click.echo(f"enrolled as {enroller.device_id}: certificate in {enroller.cert_file}")
