"""`edge-sdk run PIPELINE.yaml`."""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path

import click
from rich.live import Live
from rich.markup import escape

from edge_sdk.core.status import StatusEvent, StatusKind
from edge_sdk.pipeline.config import PipelineConfig, load_pipeline
from edge_sdk.pipeline.metrics import RunSummary
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
    received: list[int] = []
    started: list[StatusEvent] = []

    def request_stop(signum: int, _frame: object) -> None:
        received.append(signum)
        stop.set()
        if not started:  # still building or loading the engine: that work is not worth finishing
            raise _StartInterrupted(signum)

    def on_status(event: StatusEvent) -> None:
        if event.kind is StatusKind.PIPELINE_STARTED:
            started.append(event)

    handlers = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    live = Live(console=ctx.err_console, refresh_per_second=4, transient=False) if stats else None
    on_snapshot = (lambda snapshot: live.update(render_snapshot(snapshot))) if live else None
    try:
        if live:
            live.start()
        summary = run_pipeline(config, profile, ctx.cache, stop=stop, on_status=on_status, on_snapshot=on_snapshot)
    except _StartInterrupted as interrupted:
        _stopped_during_start_up(interrupted.signum)
    except Exception:
        # A signal that lands inside a C extension's import (numpy's, onnxruntime's) comes back as
        # that extension's ImportError: the signal, not the error, is why the start-up ended.
        if received and not started:
            _stopped_during_start_up(received[0])
        raise
    finally:
        if live:
            live.stop()
        for sig, previous in handlers.items():
            signal.signal(sig, previous)
    if as_json:
        click.echo(json.dumps(summary.to_dict(), indent=2))
    else:
        _print_summary(ctx, config, profile.name, summary, stopped=stop.is_set())
    _exit_for(config, summary, received)


def _stopped_during_start_up(signum: int) -> None:
    click.echo(f"stopped during start-up, before the first frame ({signal.Signals(signum).name})", err=True)
    raise SystemExit(128 + signum) from None


class _StartInterrupted(BaseException):
    """A stop signal while the engine is still being built or loaded (BaseException, like
    KeyboardInterrupt, so no `except Exception` on the way swallows it)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _print_summary(ctx: CliContext, config: PipelineConfig, profile: str, summary: RunSummary, stopped: bool) -> None:
    console = ctx.console
    if summary.frames:
        console.print(
            f"[bold]{config.name}[/bold] on {profile}: {summary.frames} frames in {summary.seconds:.2f} s, "
            f"{summary.fps:.1f} FPS, capture-to-result latency p50 {summary.latency_p50_ms:.1f} ms / p99 "
            f"{summary.latency_p99_ms:.1f} ms"
        )
        stages = ", ".join(f"{k} {v:.1f}" for k, v in summary.stage_mean_ms.items() if k != "total")
        console.print(f"  mean per stage (ms): {stages}")
    else:
        console.print(f"[bold]{config.name}[/bold] on {profile}: no frames {'before the stop' if stopped else ''}")
    console.print(f"  engine: {'built' if summary.engine_built else 'cached'} in {summary.engine_seconds:.2f} s")
    outputs = _written_outputs(config, summary)
    if outputs:
        folders = sorted({str(o.parent) for o in outputs})
        console.print(f"  outputs in {', '.join(folders)}: {', '.join(o.name for o in outputs)}")
    dropped = {name: count for name, count in summary.dropped.items() if count}
    if dropped:
        console.print(f"  dropped frames (live sources, to stay current): {dropped}")
    skipped = {name: count for name, count in summary.frames_skipped.items() if count}
    if skipped:
        console.print(f"  [yellow]skipped frames[/yellow] (could not be decoded): {escape(str(skipped))}")
    if summary.restarts:
        console.print(f"  [yellow]restarted stages[/yellow]: {summary.restarts}")
    if stopped:
        console.print("  stopped on request")
    for name, problem in summary.sink_failures.items():
        console.print(f"  [red]sink {escape(name)} failed[/red]: {escape(problem)}")
    for name, problem in summary.source_failures.items():
        cause = problem.removeprefix(f"source {name}: ")
        console.print(f"  [red]source {escape(name)} failed[/red]: {escape(cause)}")


def _written_outputs(config: PipelineConfig, summary: RunSummary) -> list[Path]:
    """Files the sinks wrote: not those of a failed sink, nor a path that does not exist."""
    failed = " ".join(summary.sink_failures)
    paths = [Path(sink.path) for sink in config.sinks if hasattr(sink, "path")]
    return [path for path in paths if path.exists() and str(path) not in failed]


def _exit_for(config: PipelineConfig, summary: RunSummary, signals: list[int]) -> None:
    """128 + the signal for a run stopped by one (130 for Ctrl-C, 143 for SIGTERM), 1 when every
    sink or a source failed, else 0."""
    if signals:
        raise SystemExit(128 + signals[0])
    if config.sinks and len(summary.sink_failures) >= len(config.sinks):
        click.echo("error: every sink failed, no result was kept", err=True)
        raise SystemExit(1)
    if summary.source_failures:
        raise SystemExit(1)
