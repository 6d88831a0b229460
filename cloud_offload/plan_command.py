"""`edge-sdk offload plan`: measure every mode of a pipeline (planner.py) and print what each is
expected to take at a few bandwidths, the best marked; optionally a plot and the plan as a file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import numpy as np
from rich.markup import escape

from edge_sdk.cli.context import CliContext
from edge_sdk.cli.output_format import Cell, Column, OutputFormat, Styled, format_option
from edge_sdk.cli.progress_view import progress_bars
from edge_sdk.core.errors import ConfigError
from edge_sdk.engines.equivalence import SCENE_IMAGE, shipped_frames
from edge_sdk.pipeline.config import PipelineConfig, load_pipeline
from edge_sdk.pipeline.engine_setup import pipeline_gate
from edge_sdk.pipeline.from_model import detect_document, guess_model, pipeline_from_document, source_uri

from .cli import offload
from .offload_plan import OffloadPlan, PlanRow, accuracy_cell
from .planner import QUALITIES, plan_offload

MAX_FRAMES = 64


@offload.command("plan")
@click.argument("target", metavar="PIPELINE_OR_MODEL", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@click.option("--edge-profile", "edge_name", help="The edge's device profile (default: this host's).")
@click.option("--cloud-profile", "cloud_name", required=True, help="The cloud worker's device profile.")
@click.option(
    "--frames",
    "frame_count",
    default=16,
    show_default=True,
    help=f"Frames to measure on, 1..{MAX_FRAMES}: the pipeline's first file source, else the shipped scene.",
)
@click.option("--source", help="Measure on this video, image folder or source URI instead.")
@click.option("--rtt-ms", default=20.0, show_default=True, help="Round-trip time of the link for the table.")
@click.option(
    "--bandwidths",
    default="1,5,20,100",
    show_default=True,
    help="Comma-separated link bandwidths (Mbit/s) for the table's latency columns.",
)
@click.option("--threads", type=int, help="Threads per inference for every engine (default: each profile's).")
@click.option(
    "--qualities",
    default=",".join(map(str, QUALITIES)),
    show_default=True,
    help="JPEG qualities cloud mode is measured at.",
)
@click.option(
    "--project-edge",
    type=float,
    default=1.0,
    show_default=True,
    help="Multiply every measured edge time by this (a projection onto a slower or faster edge; the plan says so).",
)
@click.option(
    "--project-cloud",
    type=float,
    default=1.0,
    show_default=True,
    help="Multiply every measured worker time by this (e.g. 0.1 for a cloud 10x faster than this machine).",
)
@click.option("--plot", type=click.Path(path_type=Path, dir_okay=False), help="Write a PNG: latency vs bandwidth.")
@click.option("--out", type=click.Path(path_type=Path, dir_okay=False), help="Write the plan as JSON.")
@format_option(json_alias=True)
@click.pass_context
def plan(
    click_ctx: click.Context,
    target: Path,
    edge_name: str | None,
    cloud_name: str,
    frame_count: int,
    source: str | None,
    rtt_ms: float,
    bandwidths: str,
    threads: int | None,
    qualities: str,
    project_edge: float,
    project_cloud: float,
    plot: Path | None,
    out: Path | None,
    output_format: OutputFormat,
) -> None:
    """Measure edge, cloud and every split of PIPELINE_OR_MODEL and print each one's expected latency.

    PIPELINE_OR_MODEL is a pipeline file, or an ONNX model (its pipeline is guessed, as `detect` does).
    Edge times are measured with the edge profile, the worker's with the cloud profile, both on this
    machine; bytes are what each mode sends. A row whose accuracy the engines' gate would refuse, or a
    split whose tail computes nothing, is listed apart with the reason. --project-edge and --project-cloud
    scale what was measured onto other hardware (bytes and accuracy stay as measured); the plan and its
    table are marked as a projection.
    """
    ctx = click_ctx.find_object(CliContext) or CliContext()
    if not 1 <= frame_count <= MAX_FRAMES:
        raise ConfigError(f"--frames: expected 1..{MAX_FRAMES}, got {frame_count}")
    if rtt_ms < 0:
        raise ConfigError(f"--rtt-ms: expected >= 0, got {rtt_ms:g}")
    links = _numbers(bandwidths, "--bandwidths", float)
    if any(value <= 0 for value in links):
        raise ConfigError(f"--bandwidths: expected Mbit/s above 0, got {bandwidths}")
    quality_list = [int(q) for q in _numbers(qualities, "--qualities", int)]
    if any(not 1 <= q <= 100 for q in quality_list):
        raise ConfigError(f"--qualities: expected JPEG qualities 1..100, got {qualities}")
    for option, factor in (("--project-edge", project_edge), ("--project-cloud", project_cloud)):
        if factor <= 0:
            raise ConfigError(f"{option}: expected a factor above 0, got {factor:g}")
    if plot is not None:
        from .plan_plot import require_matplotlib

        require_matplotlib()
    edge_profile = ctx.profile(edge_name)
    cloud_profile = ctx.catalog.resolve(cloud_name)
    config, say = _pipeline(target, source)
    frames = _frames(config, frame_count, model_only=target.suffix.lower() == ".onnx" and source is None)
    with progress_bars(ctx.err_console, enabled=output_format != "json"):
        result = plan_offload(
            config, edge_profile, cloud_profile, ctx.cache, frames, threads=threads, qualities=quality_list
        )
    if (project_edge, project_cloud) != (1.0, 1.0):
        result = result.projected(project_edge, project_cloud)
    if out is not None:
        result.save(out)
    if plot is not None:
        from .plan_plot import plot_plan

        plot_plan(result, plot, rtt_ms, tuple(links))
    if output_format == "json":
        click.echo(json.dumps(plan_document(result, rtt_ms, links, plot, out), indent=2))
        return
    listing = ctx.listing(output_format)
    if say:
        listing.line(escape(say))
    _print_plan(listing, result, rtt_ms, links)
    for path, what in ((out, "plan"), (plot, "plot")):
        if path is not None:
            listing.line(f"{what}: {escape(str(path))}")


def plan_document(
    result: OffloadPlan, rtt_ms: float, links_mbps: list[float], plot: Path | None = None, out: Path | None = None
) -> dict[str, Any]:
    """`--json`: the plan, and each row's expected latency (ms, null for a refused row without
    figures) and the best kept row at each bandwidth of the table."""
    document = result.to_dict()
    for row, data in zip(result.rows, document["rows"], strict=True):
        data["label"] = row.label
        data["expected_ms"] = {_mbps(value): _rounded(row.expected_ms(value * 1e6, rtt_ms)) for value in links_mbps}
    document["rtt_ms"] = rtt_ms
    document["best"] = {_mbps(value): result.best(value * 1e6, rtt_ms).label for value in links_mbps}
    document["plot"] = None if plot is None else str(plot)
    document["out"] = None if out is None else str(out)
    return document


def _print_plan(listing: Any, result: OffloadPlan, rtt_ms: float, links: list[float]) -> None:
    best = {value: result.best(value * 1e6, rtt_ms) for value in links}
    latency_columns = [Column(f"@{_mbps(value)} Mbit/s ms", f"ms_at_{_mbps(value)}_mbps") for value in links]
    columns = [
        Column("mode"),
        Column("sends"),
        Column("edge ms", "edge_ms"),
        Column("up KB", "up_kb"),
        Column("down KB", "down_kb"),
        Column("cloud ms", "cloud_ms"),
        Column("accuracy"),
        *latency_columns,
    ]
    rows: list[list[Cell]] = []
    for row in result.kept:
        cells = _figures(row)
        for value in links:
            latency = f"{row.expected_ms(value * 1e6, rtt_ms) or 0.0:.1f}"
            cells.append(Styled(f"*{latency}", "bold green") if best[value] is row else latency)
        rows.append(cells)
    title = (
        f"{Path(result.model).name}: edge {result.edge_profile}, cloud {result.cloud_profile}, "
        f"{result.frames} frames, RTT {rtt_ms:g} ms (* best at that bandwidth)"
    )
    listing.table(columns, rows, title=title)
    if result.refused:
        refused_columns = [*columns[:7], Column("refused because", "refused")]
        listing.table(refused_columns, [[*_figures(row), row.refused or ""] for row in result.refused], title="refused")
    for note in result.notes:
        listing.line(escape(note))
    listing.line(
        escape(
            f"accuracy: against {result.reference} (the equivalence gate's metric); times on this machine, "
            "the cloud's with its profile; expected = edge + up + RTT + cloud + down (cloud_offload/cost_model.py)"
        )
    )


def _figures(row: PlanRow) -> list[Cell]:
    cost = row.cost
    if cost is None:
        return [row.mode, row.variant, None, None, None, None, accuracy_cell(row.accuracy)]
    remote = cost.is_remote
    return [
        row.mode,
        row.variant,
        f"{cost.edge_ms:.1f}",
        f"{cost.up_bytes / 1000:.1f}" if remote else None,
        f"{cost.down_bytes / 1000:.1f}" if remote else None,
        f"{cost.cloud_ms:.1f}" if remote else None,
        accuracy_cell(row.accuracy),
    ]


def _pipeline(target: Path, source: str | None) -> tuple[PipelineConfig, str]:
    """The pipeline to plan, and a line saying what was guessed for a bare model ('' for a file)."""
    if source is not None and Path(source).expanduser().exists():
        source = str(Path(source).expanduser().resolve())  # the command line's paths start here, not at the file
    if target.suffix.lower() != ".onnx":
        config = load_pipeline(target)
        if source is not None:
            spec = config.sources[0].model_copy(update={"uri": source_uri(source)})
            config = config.model_copy(update={"sources": [spec]})
        return config, ""
    guess = guess_model(target)
    document = detect_document(guess, source or str(SCENE_IMAGE), Path("build") / "offload-plan", Path.cwd())
    return pipeline_from_document(document, Path.cwd()), guess.summary


def _frames(config: PipelineConfig, count: int, *, model_only: bool) -> list[np.ndarray]:
    """Frames of the pipeline's first file source (every 8th, as the equivalence gate reads them), else
    of the shipped scene (also for a bare model: its one image varied)."""
    frames, _origin = shipped_frames(count) if model_only else pipeline_gate(config, None).read_frames(count)
    return list(frames)


def _numbers(text: str, option: str, kind: type) -> list[Any]:
    try:
        values = [kind(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ConfigError(f"{option}: expected comma-separated numbers like 1,5,20, got '{text}'") from None
    if not values:
        raise ConfigError(f"{option}: expected at least one number, got '{text}'")
    return values


def _mbps(value: float) -> str:
    return f"{value:g}"


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
