"""`edge-sdk device provision | status`: make this box a fleet member (docs/provision.md), and show what is
installed and running on it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from edge_sdk.fleet.device.box_status import box_status
from edge_sdk.fleet.device.provision_config import load_provision_config
from edge_sdk.fleet.device.provisioning import apply, plan

from .device_group import device

__all__ = ["device"]

FC = TypeVar("FC", bound=Callable[..., Any])


def _root_option(help_text: str) -> Callable[[FC], FC]:
    return click.option(
        "--root",
        type=click.Path(path_type=Path, file_okay=False),
        default=Path("/"),
        show_default=True,
        help=help_text,
    )


@device.command("provision")
@click.option(
    "--config",
    "config_path",
    required=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="provision.yaml: device id, broker, TLS files, profile, pipelines (docs/provision.md).",
)
@_root_option("The box's file system: another folder is provisioned as if it were / (no user made, nothing started).")
@click.option("--dry-run", is_flag=True, help="Print each step and whether it would change anything; change nothing.")
def provision(config_path: Path, root: Path, dry_run: bool) -> None:
    """Create the folders, the user, agent.yaml and the services of this box, and enable them (idempotent)."""
    config = load_provision_config(config_path)
    steps = plan(config)
    if dry_run:
        for step in steps:
            reason = step.skipped(root)
            state = "skip" if reason else "done" if step.done(root) else "todo"
            click.echo(f"{state:<9} {step.describe()}" + (f" ({reason})" if reason else ""))
        todo = sum(1 for step in steps if not step.skipped(root) and not step.done(root))
        click.echo(f"dry run: {todo} of {len(steps)} step(s) would change the box; nothing was changed")
        return
    changed = 0
    for step, outcome in apply(steps, root):
        changed += outcome.change == "changed"
        detail = f" ({outcome.detail})" if outcome.detail else ""
        click.echo(f"{outcome.change:<9} {step.describe()}{detail}")
    if changed:
        click.echo(f"provisioned: {changed} of {len(steps)} step(s) changed the box")
    else:
        click.echo(f"provisioned already: none of {len(steps)} step(s) changed anything")


@device.command("status")
@_root_option("The box's file system: another folder (provisioned with --root) is read as if it were /.")
@click.option("--json", "as_json", is_flag=True, help="Print the status as one JSON object.")
def status(root: Path, as_json: bool) -> None:
    """What is installed (folders, user, agent.yaml, units), what runs, and the enrollment state."""
    found = box_status(root)
    if as_json:
        click.echo(json.dumps(found, indent=2))
        return
    for line in _status_lines(found):
        click.echo(line)


def _status_lines(found: dict[str, Any]) -> list[str]:
    missing = [path for path, present in found["folders"].items() if not present]
    lines = [f"folders: {'all present' if not missing else 'missing ' + ', '.join(missing)}"]
    user = found["user"]
    lines.append(f"user: {user['name']} {'exists' if user['exists'] else 'missing'}")
    agent = found["agent_config"]
    if not agent["present"]:
        lines.append(f"agent config: {agent['path']} missing")
    elif not agent["valid"]:
        lines.append(f"agent config: invalid: {agent['error']}")
    else:
        profile = agent["profile"] or "detected at start"
        lines.append(
            f"agent config: {agent['path']} valid (device {agent['device_id']}, profile {profile}, "
            f"broker {agent['broker']})"
        )
    for name, unit in found["units"].items():
        state = ["installed" if unit["installed"] else "not installed"]
        if "@." not in name:
            state.append("enabled" if unit["enabled"] else "not enabled")
        if unit["active"] is not None:
            state.append(unit["active"])
        lines.append(f"unit {name}: {', '.join(state)}")
    lines.append(found["running"])
    enrollment = found["enrollment"]
    if enrollment is None:
        lines.append("enrollment: no enrollment.json (not enrolling by claim, or not started)")
    else:
        extra = [
            f"{key} {enrollment[key]}" for key in ("device_id", "attempts", "next_retry_at") if enrollment.get(key)
        ]
        error = f"; last error: {enrollment['last_error']}" if enrollment.get("last_error") else ""
        lines.append(
            f"enrollment: {enrollment.get('state', 'unknown')}" + (f" ({', '.join(extra)})" if extra else "") + error
        )
    return lines
