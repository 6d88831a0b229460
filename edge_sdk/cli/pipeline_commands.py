"""`edge-sdk run PIPELINE.yaml`."""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path

import click
from rich.live import Live
from rich.markup import escape

from edge_sdk.pipeline.config import load_pipeline
from edge_sdk.pipeline.run import run_pipeline

from .context import CliContext
from .stats_view import render_snapshot

pass_cli = click.make_pass_decorator(CliContext)


@click.command()
@click.argument("pipeline", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--profile", "profile_name", help="Device profile (default: the file's, else detected).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--stats", is_flag=True, help="Show a live table of stages, frame rings and latency.")
@pass_cli
def run(ctx: CliContext, pipeline: Path, profile_name: str | None, as_json: bool, stats: bool) -> None:
    """Run a pipeline file until its sources end; Ctrl-C or SIGTERM drains it and stops cleanly."""
    config = load_pipeline(pipeline)
    profile = ctx.profile(profile_name or config.profile)
    stop = threading.Event()
    handlers = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    live = Live(console=ctx.err_console, refresh_per_second=4, transient=False) if stats else None
    on_snapshot = (lambda snapshot: live.update(render_snapshot(snapshot))) if live else None
    try:
        if live:
            live.start()
        summary = run_pipeline(config, profile, ctx.cache, stop=stop, on_snapshot=on_snapshot)
    finally:
        if live:
            live.stop()
        for sig, previous in handlers.items():
            signal.signal(sig, previous)
    if as_json:
        click.echo(json.dumps(summary.to_dict(), indent=2))
        return
    console = ctx.console
    console.print(
        f"[bold]{config.name}[/bold] on {profile.name}: {summary.frames} frames in {summary.seconds:.2f} s, "
        f"{summary.fps:.1f} FPS, capture-to-result latency p50 {summary.latency_p50_ms:.1f} ms / p99 "
        f"{summary.latency_p99_ms:.1f} ms"
    )
    stages = ", ".join(f"{k} {v:.1f}" for k, v in summary.stage_mean_ms.items() if k != "total")
    console.print(f"  mean per stage (ms): {stages}")
    console.print(f"  engine: {'built' if summary.engine_built else 'cached'} in {summary.engine_seconds:.2f} s")
    outputs = [str(sink.path) for sink in config.sinks if hasattr(sink, "path")]
    if outputs:
        folders = sorted({str(Path(o).parent) for o in outputs})
        console.print(f"  outputs in {', '.join(folders)}: {', '.join(Path(o).name for o in outputs)}")
    dropped = {name: count for name, count in summary.dropped.items() if count}
    if dropped:
        console.print(f"  dropped frames (live sources, to stay current): {dropped}")
    skipped = {name: count for name, count in summary.frames_skipped.items() if count}
    if skipped:
        console.print(f"  [yellow]skipped frames[/yellow] (could not be decoded): {escape(str(skipped))}")
    if summary.restarts:
        console.print(f"  [yellow]restarted stages[/yellow]: {summary.restarts}")
    if stop.is_set():
        console.print("  stopped on request")
    for name, problem in summary.sink_failures.items():
        console.print(f"  [red]sink {escape(name)} failed[/red]: {escape(problem)}")
