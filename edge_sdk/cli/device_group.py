"""The `edge-sdk device` group: what runs on the box itself to make it a fleet member. Its commands live in
device_commands (provision, status) and device_enroll_commands (enroll), which main.py imports with the group."""

from __future__ import annotations

import click


@click.group()
def device() -> None:
    """On the box: provision it (folders, user, services, agent config), enroll it by claim, show its status."""
