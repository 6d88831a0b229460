"""`edge-sdk run PIPELINE.yaml`."""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path

import click
from rich.markup import escape

from edge_sdk.pipeline.config import load_pipeline
from edge_sdk.pipeline.loop import run_pipeline

from .context import CliContext

pass_cli = click.make_pass_decorator(CliContext)


@click.command()
@click.argument("pipeline", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--profile", "profile_name", help="Device profile (default: the file's, else detected).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@pass_cli
def run(ctx: CliContext, pipeline: Path, profile_name: str | None, as_json: bool) -> None:
    """Run a pipeline file until its sources end (Ctrl-C stops it cleanly)."""
    config = load_pipeline(pipeline)
    profile = ctx.profile(profile_name or config.profile)
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        summary = run_pipeline(config, profile, ctx.cache, stop=stop)
    except KeyboardInterrupt:
        raise click.exceptions.Abort() from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    if as_json:
        click.echo(json.dumps(summary.to_dict(), indent=2))
        return
    console = ctx.console
    console.print(
        f"[bold]{config.name}[/bold] on {profile.name}: {summary.frames} frames in {summary.seconds:.2f} s, "
        f"{summary.fps:.1f} FPS, latency p50 {summary.latency_p50_ms:.1f} ms / p99 {summary.latency_p99_ms:.1f} ms"
    )
    stages = ", ".join(f"{k} {v:.1f}" for k, v in summary.stage_mean_ms.items() if k != "total")
    console.print(f"  mean per stage (ms): {stages}")
    console.print(f"  engine: {'built' if summary.engine_built else 'cached'} in {summary.engine_seconds:.2f} s")
    outputs = [str(sink.path) for sink in config.sinks if hasattr(sink, "path")]
    if outputs:
        folders = sorted({str(Path(o).parent) for o in outputs})
        console.print(f"  outputs in {', '.join(folders)}: {', '.join(Path(o).name for o in outputs)}")
    for name, problem in summary.sink_failures.items():
        console.print(f"  [red]sink {escape(name)} failed[/red]: {escape(problem)}")
