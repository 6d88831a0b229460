"""`edge-sdk build`, `edge-sdk bench`, `edge-sdk cache ls | rm | verify`."""

from __future__ import annotations

import json
from pathlib import Path

import click
import numpy as np
from rich.markup import escape
from rich.table import Table

from edge_sdk.engines.benchmark import benchmark_engine
from edge_sdk.engines.engine import prepare_engine, verify_cache
from edge_sdk.errors import ConfigError, SourceError
from edge_sdk.precision import PRECISIONS, Precision

from .context import CliContext

pass_cli = click.make_pass_decorator(CliContext)
model_argument = click.argument("model", type=click.Path(path_type=Path, dir_okay=False))
profile_option = click.option("--profile", "profile_name", help="Device profile (default: detected from the host).")
precision_option = click.option("--precision", type=click.Choice(PRECISIONS), help="Default: the profile's.")


@click.command()
@model_argument
@profile_option
@precision_option
@click.option("--json", "as_json", is_flag=True, help="Print the manifest as JSON.")
@pass_cli
def build(ctx: CliContext, model: Path, profile_name: str | None, precision: Precision | None, as_json: bool) -> None:
    """Build MODEL.onnx into a cached engine for the profile's backend."""
    profile = ctx.profile(profile_name)
    with ctx.console.status(f"Preparing engine for {model.name} on {profile.name}…"):
        prepared = prepare_engine(model, profile, precision, ctx.cache)
    if as_json:
        click.echo(json.dumps(prepared.entry.manifest, indent=2))
        return
    state = "built" if prepared.built else "cached"
    click.echo(f"{state}: {prepared.entry.directory} ({prepared.seconds:.2f} s)")
    facts = prepared.entry.manifest.get("facts", {})
    for name in ("providers_used", "nodes_before", "nodes_after", "optimize_seconds"):
        if name in facts:
            click.echo(f"  {name}: {facts[name]}")


@click.command()
@model_argument
@profile_option
@precision_option
@click.option("--batch", "batches", default="1", show_default=True, help="Comma-separated batch sizes.")
@click.option("--warmup", default=5, show_default=True, help="Untimed runs per batch size.")
@click.option("--iterations", default=50, show_default=True, help="Timed runs per batch size.")
@click.option("--dynamic-size", default=320, show_default=True, help="Size given to dynamic non-batch axes.")
@click.option("--image", type=click.Path(path_type=Path, dir_okay=False), help="Feed this image to image inputs.")
@click.option("--json", "as_json", is_flag=True, help="Print results as JSON.")
@pass_cli
def bench(
    ctx: CliContext,
    model: Path,
    profile_name: str | None,
    precision: Precision | None,
    batches: str,
    warmup: int,
    iterations: int,
    dynamic_size: int,
    image: Path | None,
    as_json: bool,
) -> None:
    """Latency p50/p99 and throughput per batch size, after warm-up."""
    try:
        batch_sizes = [int(b) for b in batches.split(",") if b.strip()]
    except ValueError:
        raise ConfigError(f"--batch: expected comma-separated integers like 1,2,4, got '{batches}'") from None
    frame = _read_image(image) if image else None
    profile = ctx.profile(profile_name)
    prepared = prepare_engine(model, profile, precision, ctx.cache)
    with prepared.open() as runner:
        timings = benchmark_engine(runner, batch_sizes, warmup, iterations, dynamic_size, frame)
    if as_json:
        payload = {"model": str(model), "profile": profile.name, "precision": prepared.precision}
        click.echo(json.dumps(payload | {"results": [t.to_dict() for t in timings]}, indent=2))
        return
    table = Table("batch", "p50 ms", "p99 ms", "mean ms", "items/s", title=f"{model.name} on {profile.name}")
    for t in timings:
        table.add_row(str(t.batch), f"{t.p50_ms:.2f}", f"{t.p99_ms:.2f}", f"{t.mean_ms:.2f}", f"{t.throughput:.1f}")
    ctx.console.print(table)


def _read_image(path: Path) -> np.ndarray:
    from edge_sdk.sources.opencv import import_cv2

    image = import_cv2().imread(str(path))
    if image is None:
        raise SourceError(f"cannot read image {path}")
    return image


@click.group()
def cache() -> None:
    """The engine cache: list, remove, verify entries."""


@cache.command("ls")
@click.option("--json", "as_json", is_flag=True)
@pass_cli
def cache_ls(ctx: CliContext, as_json: bool) -> None:
    """Entries with their model, profile, backend and state."""
    reports = verify_cache(ctx.cache)
    if as_json:
        click.echo(json.dumps([{"digest": r.digest, "problem": r.problem, **r.manifest} for r in reports], indent=2))
        return
    table = Table("digest", "model", "profile", "backend", "precision", "built", "state", title=str(ctx.cache.root))
    for r in reports:
        key = r.manifest.get("key", {})
        model = Path(r.manifest.get("facts", {}).get("model_path", "?")).name
        backend = f"{key.get('backend', '?')} {key.get('backend_version', '')}"
        table.add_row(
            r.digest[:12],
            model,
            key.get("profile_name", "?"),
            backend,
            key.get("precision", "?"),
            r.manifest.get("built_at", "?"),
            escape(r.problem or "ok"),
        )
    ctx.console.print(table)


@cache.command("rm")
@click.argument("digest", required=False)
@click.option("--all", "remove_all", is_flag=True, help="Remove every entry.")
@click.option("--stale", is_flag=True, help="Remove entries that are corrupt or built by another backend version.")
@pass_cli
def cache_rm(ctx: CliContext, digest: str | None, remove_all: bool, stale: bool) -> None:
    """Remove the entry DIGEST (a prefix is enough), --stale ones, or --all."""
    engine_cache = ctx.cache
    if sum((digest is not None, remove_all, stale)) != 1:
        raise ConfigError("cache rm: give exactly one of DIGEST, --stale or --all")
    if stale:
        removed = []
        for report in verify_cache(engine_cache):
            if report.problem:
                removed += engine_cache.remove(report.digest)
    else:
        removed = engine_cache.remove(None if remove_all else digest)
    if digest and not removed:
        raise ConfigError(f"no cache entry starts with '{digest}' in {engine_cache.root}")
    click.echo(f"removed {len(removed)} entr{'y' if len(removed) == 1 else 'ies'}")


@cache.command("verify")
@pass_cli
def cache_verify(ctx: CliContext) -> None:
    """Check every entry's files against their hashes and backend version; exit 1 if any is bad."""
    reports = verify_cache(ctx.cache)
    bad = [r for r in reports if r.problem]
    for r in bad:
        click.echo(f"{r.digest[:12]}: {r.problem}")
    click.echo(f"{len(reports) - len(bad)} ok, {len(bad)} bad in {ctx.cache.root}")
    if bad:
        raise SystemExit(1)
