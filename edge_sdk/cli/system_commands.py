"""`edge-sdk doctor` and `edge-sdk schema`."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.markup import escape

from edge_sdk.doctor import diagnose
from edge_sdk.schemas import SCHEMAS, schema_json

from .context import CliContext
from .output_format import Column, OutputFormat, Styled, format_option

pass_cli = click.make_pass_decorator(CliContext)


@click.command()
@format_option(json_alias=True)
@pass_cli
def doctor(ctx: CliContext, output_format: OutputFormat) -> None:
    """What host was detected, what the SDK can use here, and how to install what is missing."""
    report = diagnose(ctx.catalog)
    if output_format == "json":
        click.echo(json.dumps(report.to_dict(), indent=2, default=str))
        return
    out = ctx.listing(output_format)
    host = report.host
    out.line(f"python {report.python}, arch {host['arch']}, cpu {escape(host['cpu_model'] or 'unknown')}")
    if report.detected_profile:
        out.line(f"detected profile: [bold]{report.detected_profile}[/bold]")
    else:
        out.line(f"[red]no profile detected[/red]: {escape(report.detection_problem or '')}")
    out.table(
        ("package", "for", "version", "install"),
        [
            (p.name, p.purpose, p.version or Styled("missing", "red"), None if p.version else p.install)
            for p in report.packages
        ],
    )
    for backend, facts in report.backends.items():
        out.line(f"{backend} backend:" + ("" if facts else " nothing usable"))
        for what, state in facts.items():
            out.line(f"  {what}: " + (state if state == "usable" else f"[red]{escape(state)}[/red]"))
    out.table(
        ("profile", Column("usable here", "usable"), Column("why not / note", "problem")),
        [(s.name, s.usable if s.usable else Styled("no", "red"), s.problem or s.note) for s in report.profiles],
    )
    for tool, where in report.tools.items():
        out.line(f"{tool}: {where or 'not found'}")


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
