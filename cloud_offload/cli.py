"""`edge-sdk offload ...`: the commands of cloud_offload, found by the SDK through an entry point."""

from __future__ import annotations

import click


@click.group("offload")
def offload() -> None:
    """Split inference between this box and cloud workers over MQTT."""


# Each subcommand's module registers itself on the group.
from . import plan_command, status_command, tail_command, worker_command  # noqa: E402, F401
