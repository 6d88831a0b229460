"""The `edge-sdk fleet` group; its commands live in fleet_keys_commands (keygen, sign), fleet_init_commands
(init, manifest; imported by fleet_keys_commands) and fleet_commands (ls, deploy, resume, status, rollback,
exec), which main.py imports with the group (COMMANDS) so that all of them are registered."""

from __future__ import annotations

import click


@click.group()
def fleet() -> None:
    """Fleet control: an example fleet, signing keys, signed deployments, staged rollouts, devices and commands."""
