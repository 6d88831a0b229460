"""`edge-sdk agent --config agent.yaml`: run the device agent until SIGTERM / SIGINT.

Under a Type=notify systemd unit (deploy/systemd/edge-sdk-agent.service) `run_agent` tells systemd
READY=1, WATCHDOG=1 and STOPPING=1 through $NOTIFY_SOCKET (edge_sdk.core.systemd_notify).
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import click

from edge_sdk.fleet.device.agent_config import load_agent_config
from edge_sdk.fleet.device.agent_service import run_agent


@click.command("agent")
@click.option(
    "--config",
    "config_path",
    required=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="Agent config (device id, broker with TLS client certificate, store folder, trusted keys).",
)
def agent(config_path: Path) -> None:
    """Run the fleet device agent: presence, commands, signed deployments, desired state."""
    config = load_agent_config(config_path)
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    click.echo(f"agent {config.device_id}: connecting to {config.broker.address}")
    run_agent(config, stop)
    click.echo(f"agent {config.device_id}: stopped")
