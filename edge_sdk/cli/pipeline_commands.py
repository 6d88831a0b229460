"""`edge-sdk run PIPELINE.yaml`: run a pipeline, print what it did, exit for how it ended; `run_and_report`
and `run_options` do the same for any command that makes a pipeline (`edge-sdk detect`)."""

from __future__ import annotations

import contextlib
import json
import math
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.live import Live
from rich.markup import escape

from edge_sdk.core.status import StatusEvent, StatusKind
from edge_sdk.core.systemd_notify import SystemdNotifier
from edge_sdk.pipeline.config import PipelineConfig, load_pipeline
from edge_sdk.pipeline.metrics import RunSummary
from edge_sdk.pipeline.run import run_pipeline
from edge_sdk.profiles import DeviceProfile
from edge_sdk.sinks.preview import PreviewSinkSpec, open_in_browser, preview_url, wait_for_preview
from edge_sdk.sinks.stdout import StdoutSinkSpec

from .context import CliContext
from .stats_view import render_snapshot

pass_cli = click.make_pass_decorator(CliContext)

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
FileState = tuple[int, int, int]
"""What tells a file this run wrote from one it found: (inode, size, mtime in ns)."""


def run_options(command: Callable[..., None]) -> Callable[..., None]:
    """The options every command that runs a pipeline takes (`run`, `detect`): the profile, the
    output for scripts and the live stage table."""
    for option in reversed(
        (
            click.option("--profile", "profile_name", help="Device profile (default: the file's, else detected)."),
            click.option(
                "--json",
                "as_json",
                is_flag=True,
                help="Print the run summary as one JSON document, and nothing else on stdout: a stdout sink's "
                "lines go to stderr.",
            ),
            click.option(
                "--jsonl",
                "as_jsonl",
                is_flag=True,
                help="Stream each frame's result as one line of JSON on stdout, and nothing else there: a stdout "
                "sink's lines and the summary go to stderr.",
            ),
            click.option("--stats", is_flag=True, help="Show a live table of stages, frame rings and latency."),
            click.option(
                "--show",
                is_flag=True,
                help="Watch it live: serve the annotated frames over HTTP (a preview sink, unless the pipeline "
                "has one) and open the page in the browser once the pipeline runs; without a browser the "
                "address is printed.",
            ),
        )
    ):
        command = option(command)
    return command


@click.command()
@click.argument("pipeline", type=click.Path(path_type=Path, dir_okay=False))
@run_options
@pass_cli
def run(
    ctx: CliContext,
    pipeline: Path,
    profile_name: str | None,
    as_json: bool,
    as_jsonl: bool,
    stats: bool,
    show: bool,
) -> None:
    """Run a pipeline file until its sources end. Ctrl-C or SIGTERM drains it and stops it (exit 128 + the signal)."""
    run_and_report(
        ctx, lambda: load_pipeline(pipeline), profile_name, as_json=as_json, as_jsonl=as_jsonl, stats=stats, show=show
    )


def run_and_report(
    ctx: CliContext,
    make_config: Callable[[], PipelineConfig],
    profile_name: str | None,
    *,
    as_json: bool,
    as_jsonl: bool,
    stats: bool,
    show: bool = False,
) -> None:
    """Run the pipeline `make_config` returns, print its summary (or the JSON document) and exit for
    how it ended: what `edge-sdk run` does, for any command that makes a pipeline. `make_config` runs
    under the stop-signal handlers, so a Ctrl-C while it loads or guesses ends the start-up in one line."""
    if as_json and as_jsonl:
        raise click.UsageError("--json and --jsonl both print on stdout: choose one")
    ended = threading.Event()
    with _StopSignals() as signals, _setting_on_exit(ended):
        try:
            try:
                config = make_config()
                if show:
                    config, url = _with_preview(config)
                    _open_when_served(ctx, url, ended)
                if as_json or as_jsonl:
                    config = _stdout_for_scripts(config, results_as_jsonl=as_jsonl)
                profile = ctx.profile(profile_name or config.profile)
                found = _file_states(_output_candidates(config))
                summary = _run(ctx, config, profile, signals, stats)
            except Exception:
                # A signal that lands inside a C extension's import (numpy's, onnxruntime's, onnx's)
                # comes back as that extension's ImportError: the signal, not the error, is why the
                # start-up ended.
                if signals.first is not None and not signals.started:
                    raise _StartInterrupted(signals.first) from None
                raise
        except _StartInterrupted as stopped:
            signals.settle()
            if as_json:
                click.echo(_json_document(None, [], stopped.signum, started=False))
            _say_interrupted(stopped.signum, None)
        interrupted = signals.settle()
        outputs = _written_outputs(config, summary, found)
        if as_json:
            click.echo(_json_document(summary, outputs, interrupted, started=True))
        else:
            console = ctx.err_console if as_jsonl else ctx.console
            _print_summary(console, config, profile.name, summary, outputs, stopped=interrupted is not None)
        if interrupted is not None:
            _say_interrupted(interrupted, summary.frames)
        _exit_for(config, summary)


def _run(
    ctx: CliContext, config: PipelineConfig, profile: DeviceProfile, signals: _StopSignals, stats: bool
) -> RunSummary:
    def on_status(event: StatusEvent) -> None:
        if event.kind is StatusKind.PIPELINE_STARTED:
            signals.started = True

    live = Live(console=ctx.err_console, refresh_per_second=4, transient=False) if stats else None
    on_snapshot = (lambda snapshot: live.update(render_snapshot(snapshot))) if live else None
    try:
        if live:
            live.start()
        # Under a Type=notify systemd unit (deploy/systemd/edge-sdk-pipeline@.service): READY, WATCHDOG, STOPPING.
        notifier = SystemdNotifier.from_environment()
        return run_pipeline(
            config,
            profile,
            ctx.cache,
            stop=signals.stop,
            on_status=on_status,
            on_snapshot=on_snapshot,
            notifier=notifier,
        )
    finally:
        if live:
            live.stop()


class _StopSignals:
    """SIGINT and SIGTERM while `run` runs. The first one sets `stop`: the pipeline drains and
    stops. During start-up (engine built or loaded, before PIPELINE_STARTED) it also ends the
    start-up at once, as that work is not worth finishing. Later signals change nothing, and once
    the run has returned (`settle`) none does: the summary still prints whole."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.first: int | None = None
        self.started = False
        self._settled = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _StopSignals:
        self._previous = {sig: signal.signal(sig, self._on_signal) for sig in STOP_SIGNALS}
        return self

    def __exit__(self, *_exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def settle(self) -> int | None:
        """The signal that stopped the run, if one did; signals after this call are ignored."""
        self._settled = True
        return self.first

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if self._settled or self.first is not None:
            return
        self.first = signum
        self.stop.set()
        if not self.started:
            raise _StartInterrupted(signum)


class _StartInterrupted(BaseException):
    """A stop signal while the engine is still being built or loaded (BaseException, like
    KeyboardInterrupt, so no `except Exception` on the way swallows it)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _say_interrupted(signum: int, frames: int | None) -> NoReturn:
    """The one line a stop by signal prints (on stderr), and its exit: 128 + the signal."""
    name = signal.Signals(signum).name
    if frames is None:
        what = "stopped during start-up, no frame was processed"
    elif frames == 0:
        what = "stopped before the first frame"
    else:
        what = f"stopped after {_frames(frames)}"
    click.echo(f"interrupted ({name}): {what}", err=True)
    raise SystemExit(128 + signum)


def _with_preview(config: PipelineConfig) -> tuple[PipelineConfig, str]:
    """The pipeline with a preview sink (its own, else one added on a free port, which the sink logs
    when the pipeline starts), and the page's address."""
    for spec in config.sinks:
        if isinstance(spec, PreviewSinkSpec):
            return config, preview_url(spec)
    preview = PreviewSinkSpec(type="preview", port=0)
    return config.model_copy(update={"sinks": [*config.sinks, preview]}), preview_url(preview)


def _open_when_served(ctx: CliContext, url: str, ended: threading.Event) -> None:
    """Open `url` in the browser once the preview answers (the engine is ready and the sinks are
    open), in a thread that gives up when the run has ended; say the address where no browser opens."""

    def wait_and_open() -> None:
        while not ended.is_set():
            if wait_for_preview(url, timeout_s=1.0):
                if not open_in_browser(url):
                    ctx.err_console.print(
                        f"preview: no browser to open here; watch it at {escape(url)}", soft_wrap=True
                    )
                return

    threading.Thread(target=wait_and_open, name="open-preview", daemon=True).start()


@contextlib.contextmanager
def _setting_on_exit(event: threading.Event) -> Iterator[None]:
    try:
        yield
    finally:
        event.set()


def _stdout_for_scripts(config: PipelineConfig, results_as_jsonl: bool) -> PipelineConfig:
    """The pipeline with stdout kept for what a script parses: stdout sinks print to stderr, and
    with --jsonl a sink prints every Result's JSON on stdout."""
    sinks: list[Any] = [spec.on_stderr() if isinstance(spec, StdoutSinkSpec) else spec for spec in config.sinks]
    if results_as_jsonl:
        sinks.append(StdoutSinkSpec.json_lines())
    return config.model_copy(update={"sinks": sinks})


def _output_candidates(config: PipelineConfig) -> dict[Path, str]:
    """Files the sinks may write, by path, with the sink name a failure is reported under. A video
    sink restarted after a crash writes NAME.partN.EXT next to NAME.EXT."""
    candidates: dict[Path, str] = {}
    for spec in config.sinks:
        path = getattr(spec, "path", None)
        if not isinstance(path, Path):
            continue
        for candidate in (path, *sorted(path.parent.glob(f"{path.stem}.part*{path.suffix}"))):
            candidates[candidate] = f"{spec.type}:{candidate}"
    return candidates


def _file_states(candidates: dict[Path, str]) -> dict[Path, FileState]:
    states = {}
    for path in candidates:
        try:
            stat = path.stat()
        except OSError:
            continue
        states[path] = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
    return states


def _written_outputs(config: PipelineConfig, summary: RunSummary, found: dict[Path, FileState]) -> list[Path]:
    """Files this run's sinks wrote: on disk, changed since the start (not one an earlier run left),
    and not those of a sink that failed."""
    candidates = _output_candidates(config)
    now = _file_states(candidates)
    return [
        path
        for path, sink in candidates.items()
        if path in now and now[path] != found.get(path) and sink not in summary.sink_failures
    ]


def _json_document(summary: RunSummary | None, outputs: list[Path], interrupted: int | None, started: bool) -> str:
    """The run summary (RunSummary.to_dict), the files written, and how it ended, as strict JSON:
    a latency no frame measured is null, not NaN."""
    if summary is None:  # stopped before the engines were ready
        summary = RunSummary(0, 0.0, math.nan, math.nan, {}, {}, engine_built=False, engine_seconds=0.0)
    document = {
        **summary.to_dict(),
        "outputs": [str(path) for path in outputs],
        "started": started,
        "interrupted_by": signal.Signals(interrupted).name if interrupted is not None else None,
    }
    return json.dumps(_finite(document), indent=2, allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    return value


def _print_summary(
    console: Console, config: PipelineConfig, profile: str, summary: RunSummary, outputs: list[Path], stopped: bool
) -> None:
    if summary.frames:
        console.print(
            f"[bold]{config.name}[/bold] on {profile}: {_frames(summary.frames)} in {summary.seconds:.2f} s, "
            f"{summary.fps:.1f} FPS, {_latency(summary)}"
        )
        stages = ", ".join(
            f"{k} {v:.1f}" for k, v in summary.stage_mean_ms.items() if k != "total" and math.isfinite(v)
        )
        if stages:
            console.print(f"  mean per stage (ms): {stages}")
    else:
        console.print(f"[bold]{config.name}[/bold] on {profile}: no frames{' before the stop' if stopped else ''}")
    console.print(f"  engine: {'built' if summary.engine_built else 'cached'} in {summary.engine_seconds:.2f} s")
    if outputs:
        folders = sorted({str(o.parent) for o in outputs})
        console.print(f"  outputs in {escape(', '.join(folders))}: {escape(', '.join(o.name for o in outputs))}")
    if summary.model_frames:
        fallback = summary.model_frames.get("fallback", 0)
        console.print(f"  fallback model: {fallback} of {sum(summary.model_frames.values())} frames")
    if dropped := _counts(summary.dropped):
        console.print(f"  dropped frames (live sources, to stay current): {escape(dropped)}")
    if skipped := _counts(summary.frames_skipped):
        console.print(f"  [yellow]skipped frames[/yellow] (could not be decoded): {escape(skipped)}")
    if restarts := _counts(summary.restarts):
        console.print(f"  [yellow]restarted stages[/yellow] (times): {escape(restarts)}")
    if stopped:
        console.print("  stopped on request")
    # A failed sink was reported when it failed, and is not among the outputs; a failed source is
    # reported here, once.
    for name, problem in summary.source_failures.items():
        cause = problem.removeprefix(f"source {name}: ")
        console.print(f"  [red]source {escape(name)} failed[/red]: {escape(cause)}")


def _latency(summary: RunSummary) -> str:
    if not (math.isfinite(summary.latency_p50_ms) and math.isfinite(summary.latency_p99_ms)):
        return "no latency measured"
    return f"latency p50 {summary.latency_p50_ms:.1f} ms / p99 {summary.latency_p99_ms:.1f} ms"


def _frames(count: int) -> str:
    return f"{count} frame{'' if count == 1 else 's'}"


def _counts(counts: dict[str, int]) -> str:
    """`door 11, lobby 3` for the names with a count."""
    return ", ".join(f"{name} {count}" for name, count in counts.items() if count)


def _exit_for(config: PipelineConfig, summary: RunSummary) -> None:
    """1 when every sink or a source failed, else 0 (a stop by signal exits in _say_interrupted)."""
    if config.sinks and len(summary.sink_failures) >= len(config.sinks):
        click.echo("error: every sink failed, no result was kept", err=True)
        raise SystemExit(1)
    if summary.source_failures:
        raise SystemExit(1)
