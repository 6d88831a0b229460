"""`edge-sdk doctor` and `edge-sdk schema`."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.markup import escape
from rich.table import Table

from edge_sdk.doctor import diagnose
from edge_sdk.schemas import SCHEMAS, schema_json

from .context import CliContext

pass_cli = click.make_pass_decorator(CliContext)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@pass_cli
def doctor(ctx: CliContext, as_json: bool) -> None:
    """What host was detected, what the SDK can use here, and how to install what is missing."""
    report = diagnose(ctx.catalog)
    if as_json:
        click.echo(json.dumps(report.to_dict(), indent=2, default=str))
        return
    console = ctx.console
    host = report.host
    console.print(f"python {report.python}, arch {host['arch']}, cpu {host['cpu_model'] or 'unknown'}")
    if report.detected_profile:
        console.print(f"detected profile: [bold]{report.detected_profile}[/bold]")
    else:
        console.print(f"[red]no profile detected[/red]: {escape(report.detection_problem or '')}")
    packages = Table("package", "for", "version", "install")
    for p in report.packages:
        packages.add_row(
            p.name, p.purpose, escape(p.version or "") or "[red]missing[/red]", "" if p.version else escape(p.install)
        )
    console.print(packages)
    for backend, facts in report.backends.items():
        console.print(f"{backend} backend:" + ("" if facts else " nothing usable"))
        for what, state in facts.items():
            console.print(f"  {what}: " + (state if state == "usable" else f"[red]{escape(state)}[/red]"))
    profiles = Table("profile", "usable here", "why not / note")
    for status in report.profiles:
        usable = "yes" if status.usable else "[red]no[/red]"
        profiles.add_row(status.name, usable, escape(status.problem or status.note or ""))
    console.print(profiles)
    for tool, where in report.tools.items():
        console.print(f"{tool}: {where or 'not found'}")


@click.command()
@click.argument("kind", type=click.Choice(sorted(SCHEMAS)))
@click.option("--out", type=click.Path(path_type=Path, dir_okay=False), help="Write to this file instead of stdout.")
def schema(kind: str, out: Path | None) -> None:
    """JSON Schema of profile or pipeline files, for editors."""
    text = schema_json(kind)
    if out:
        out.write_text(text)
    else:
        click.echo(text, nl=False)
