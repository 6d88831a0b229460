"""`edge-sdk profiles list | show NAME | detect`."""

from __future__ import annotations

import json

import click
import yaml

from edge_sdk.core.host import HostProbe

from .context import CliContext
from .output_format import OutputFormat, format_option

pass_cli = click.make_pass_decorator(CliContext)


@click.group()
def profiles() -> None:
    """Device profiles: list them, show one, detect this host's."""


@profiles.command("list")
@format_option()
@pass_cli
def list_profiles(ctx: CliContext, output_format: OutputFormat) -> None:
    """All profiles, with their backend, providers and precisions."""
    rows = [
        (p.name, p.engine.backend, p.backend().devices(p.engine), list(p.precisions), p.description)
        for p in ctx.catalog.load_all()
    ]
    ctx.listing(output_format).table(("profile", "backend", "providers", "precisions", "description"), rows)


@profiles.command("show")
@click.argument("name")
@pass_cli
def show_profile(ctx: CliContext, name: str) -> None:
    """One profile, fully resolved (defaults filled in), as YAML."""
    profile = ctx.catalog.load(name)
    click.echo(yaml.safe_dump(profile.model_dump(mode="json"), sort_keys=False), nl=False)


@profiles.command("detect")
@click.option("--json", "as_json", is_flag=True, help="Print the facts and the choice as JSON.")
@pass_cli
def detect_profile(ctx: CliContext, as_json: bool) -> None:
    """Which profile this host gets, and the facts that chose it."""
    facts = HostProbe().facts()
    profile = ctx.catalog.detect(facts)
    if as_json:
        click.echo(json.dumps({"profile": profile.name, "device_identity": facts.device_identity()}, indent=2))
        return
    click.echo(profile.name)
    click.echo(f"  arch: {facts.arch}, cpu: {facts.cpu_model or 'unknown'}", err=True)
    if facts.device_tree_model:
        click.echo(f"  board: {facts.device_tree_model}, DLA cores: {facts.dla_cores}", err=True)
    if facts.nvidia_gpus:
        click.echo(f"  GPUs: {', '.join(facts.nvidia_gpus)}", err=True)
    if facts.npu_devices or facts.npu_chip:
        click.echo(f"  NPU: {facts.npu_chip or 'unknown'} x{facts.npu_devices}", err=True)
