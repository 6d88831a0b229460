"""The `edge-sdk fleet` group; its commands live in fleet_keys_commands (keygen, sign) and fleet_commands
(ls, deploy, resume, status, rollback, exec), which main.py imports with the group (COMMANDS) so that all of them are registered."""

from __future__ import annotations

import click


@click.group()
def fleet() -> None:
    """Fleet control: signing keys, signed deployments, staged rollouts, device list and commands."""
