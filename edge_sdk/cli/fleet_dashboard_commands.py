"""`edge-sdk fleet dashboard`: the fleet in a browser (edge_sdk/fleet/dashboard/)."""

from __future__ import annotations

from pathlib import Path

import click

from .fleet_group import fleet
from .fleet_options import broker_option, key_option, state_option


@fleet.command("dashboard")
@broker_option
@state_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535), help="Port (0: any free one).")
@click.option(
    "--token-file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="File holding the login token (at least 16 characters); default: a new token, printed in the login link.",
)
@click.option("--read-only", is_flag=True, help="Show the fleet; refuse every action.")
@click.option(
    "--manifests",
    "manifests_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Folder of signed manifests (*.signed, *.json) the rollouts page may deploy, with their inline artifacts.",
)
@key_option
def dashboard(
    broker_file: Path,
    state_file: Path,
    host: str,
    port: int,
    token_file: Path | None,
    read_only: bool,
    manifests_dir: Path | None,
    key_file: Path | None,
) -> None:
    """Serve the fleet dashboard: devices, rollouts, live pipelines and previews, and actions (Ctrl-C stops).

    It connects to the broker as one more operator (--broker), reads and writes the rollouts in --state,
    and listens on 127.0.0.1 unless --host says otherwise. Needs the `dashboard` extra.
    """
    from edge_sdk.fleet.dashboard.server import DashboardSettings, serve_dashboard

    serve_dashboard(
        DashboardSettings(
            broker_file=broker_file,
            state_file=state_file,
            host=host,
            port=port,
            token_file=token_file,
            read_only=read_only,
            manifests_dir=manifests_dir,
            key_file=key_file,
        ),
        announce=click.echo,
    )
