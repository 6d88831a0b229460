"""`edge-sdk build`, `edge-sdk bench`, `edge-sdk cache ls | rm | verify`."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import numpy as np
from rich.markup import escape

from edge_sdk.backends.calibration import Calibration, int8_settings, make_calibration
from edge_sdk.backends.calibration.setup import TaskKind
from edge_sdk.backends.int8.accuracy import boxes_sentence
from edge_sdk.backends.registry import BACKENDS
from edge_sdk.core.errors import ConfigError, SourceError
from edge_sdk.core.model_file import ModelFile
from edge_sdk.core.precision import PRECISIONS, Precision
from edge_sdk.engines.benchmark import (
    MAX_BENCH_BATCH,
    MAX_DYNAMIC_SIZE,
    MAX_ITERATIONS,
    MAX_WARMUP,
    benchmark_engine,
    check_benchmark_arguments,
)
from edge_sdk.engines.cache import EntryReport, NotAnEntry
from edge_sdk.engines.engine import PreparedEngine, prepare_engine, verify_cache
from edge_sdk.engines.equivalence import GateData
from edge_sdk.graph.options import GraphOptions
from edge_sdk.pipeline.config import load_pipeline
from edge_sdk.pipeline.engine_setup import pipeline_calibration, pipeline_gate, pipeline_graph, pipeline_input
from edge_sdk.profiles import DeviceProfile

from .context import CliContext
from .output_format import Cell, Column, OutputFormat, format_option, in_words
from .progress_view import progress_bars

pass_cli = click.make_pass_decorator(CliContext)
model_argument = click.argument("model", type=click.Path(path_type=Path, dir_okay=False))
profile_option = click.option("--profile", "profile_name", help="Device profile (default: detected from the host).")
precision_option = click.option("--precision", type=click.Choice(PRECISIONS), help="Default: the profile's.")


def int8_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options that say how an int8 engine is calibrated and gated (part of its cache key), and --pipeline."""
    options = [
        click.option(
            "--calib",
            type=click.Path(path_type=Path),
            help="Calibration data for int8: a folder of images, a video, or an .npz (arrays by input name, "
            "optional labels).",
        ),
        click.option(
            "--calib-method",
            type=click.Choice(["minmax", "entropy", "percentile"]),
            help="Default: the profile's (minmax).",
        ),
        click.option(
            "--task",
            type=click.Choice(["classification", "detection", "generic"]),
            help="How int8 accuracy is measured. Default: from --pipeline's postprocess, else detection when the "
            "model's outputs look like a detector's (SSD detections, a YOLO head), else classification when the "
            "data has labels, else generic (cosine per output).",
        ),
        click.option("--max-drop", type=float, help="Accuracy points int8 may lose (top-1 or matched boxes)."),
        click.option("--min-cosine", type=float, help="Lowest cosine similarity to FP32 each output may have."),
        click.option(
            "--fallback",
            type=click.Choice(["none", "mixed"]),
            help="When the accuracy gate fails: none = fail with a report; mixed = keep sensitive layers in float.",
        ),
        click.option(
            "--pipeline",
            "pipeline_path",
            type=click.Path(path_type=Path, dir_okay=False),
            help="Take preprocessing (folded into the engine as a run would) and postprocessing from this pipeline.",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


@dataclass(frozen=True)
class EngineRequest:
    """What to prepare: the model, the profile, the precision, the graph passes, (int8) the calibration
    and what the equivalence gate runs (a pipeline's source and post-processing, else the defaults)."""

    model: ModelFile
    profile: DeviceProfile
    precision: Precision
    graph: GraphOptions | None
    calibration: Calibration | None
    gate: GateData | None = None

    def prepare(self, ctx: CliContext) -> PreparedEngine:
        return prepare_engine(
            self.model,
            self.profile,
            self.precision,
            ctx.cache,
            graph=self.graph,
            calibration=self.calibration,
            gate=self.gate,
        )


def engine_request(
    ctx: CliContext,
    model: Path,
    profile_name: str | None,
    precision: Precision | None,
    calib: Path | None = None,
    calib_method: str | None = None,
    task: TaskKind | None = None,
    max_drop: float | None = None,
    min_cosine: float | None = None,
    fallback: str | None = None,
    pipeline_path: Path | None = None,
) -> EngineRequest:
    """Check the options and open the calibration data before any build work."""
    profile = ctx.profile(profile_name)
    pipeline = load_pipeline(pipeline_path) if pipeline_path else None
    precision = precision or (pipeline.model.precision if pipeline else None) or profile.default_precision
    model_file = ModelFile.load(model)
    graph = pipeline_graph(pipeline, model_file) if pipeline else None
    int8_flags = {"--calib-method": calib_method, "--task": task, "--max-drop": max_drop}
    int8_flags |= {"--min-cosine": min_cosine, "--fallback": fallback}
    calibration = None
    overrides = {"method": calib_method, "max_accuracy_drop": max_drop, "min_cosine": min_cosine, "fallback": fallback}
    if precision == "int8" and pipeline is not None:
        calibration = pipeline_calibration(pipeline, model_file, profile, calib, task=task, **overrides)
    elif precision == "int8":
        if calib is None:
            raise ConfigError("precision int8 needs calibration data: add --calib DATA (images folder, video or .npz)")
        calibration = make_calibration(calib, model_file, int8_settings(profile.int8, **overrides), task)
    elif calib is not None or any(value is not None for value in int8_flags.values()):
        given = ["--calib"] if calib is not None else [flag for flag, value in int8_flags.items() if value is not None]
        verb = "applies" if len(given) == 1 else "apply"
        raise ConfigError(f"{', '.join(given)} {verb} to int8 builds; expected --precision int8, got {precision}")
    gate = pipeline_gate(pipeline, pipeline_input(pipeline, model_file)) if pipeline else None
    return EngineRequest(model_file, profile, precision, graph, calibration, gate)


@click.command()
@model_argument
@profile_option
@precision_option
@int8_options
@click.option("--json", "as_json", is_flag=True, help="Print the manifest as JSON.")
@pass_cli
def build(
    ctx: CliContext, model: Path, profile_name: str | None, precision: Precision | None, as_json: bool, **int8: Any
) -> None:
    """Build MODEL.onnx into a cached engine for the profile's backend (int8: calibrated and accuracy-gated)."""
    request = engine_request(ctx, model, profile_name, precision, **int8)
    if request.calibration is not None and request.calibration.task_note and not as_json:
        ctx.err_console.print(escape(request.calibration.task_note))
    with progress_bars(ctx.err_console, enabled=not as_json):
        prepared = request.prepare(ctx)
    if as_json:
        click.echo(json.dumps(prepared.entry.manifest, indent=2))
        return
    state = "built" if prepared.built else "cached"
    click.echo(f"{state}: {prepared.entry.directory} ({prepared.seconds:.2f} s)")
    facts = prepared.entry.manifest.get("facts", {})
    for name in ("providers_used", "nodes_before", "nodes_after", "optimize_seconds"):
        if name in facts:
            click.echo(f"  {name}: {in_words(facts[name])}")
    for line in prepared.profile.backend().describe_facts(facts):
        click.echo(f"  {line}")
    if "int8" in facts:
        for line in describe_int8(facts["int8"]):
            click.echo(f"  {line}")
    gate = prepared.gate
    if gate is not None:
        click.echo(f"  {gate.line()}")
        if gate.fold_fallback:
            click.echo(f"  preprocessing left outside the engine: the folded form failed ({gate.fold_fallback})")


def describe_int8(int8: dict[str, Any]) -> list[str]:
    """What an int8 build did and measured, for people: method, samples, layers kept in float, accuracy."""
    samples = int8.get("samples", {})
    lines = [
        f"int8: {int8.get('method')} calibration, {int8.get('format', 'QDQ')} {int8.get('activation_type')} "
        f"activations / {int8.get('weight_type')} weights{' per channel' if int8.get('per_channel') else ''}, "
        f"{samples.get('calibration')} calibration + {samples.get('held_out')} held-out samples",
        f"int8 nodes: {int8.get('int8_nodes')} of {int8.get('quantizable_nodes')} quantisable; "
        f"kept in float: {len(int8.get('excluded_nodes', []))}{_recipe_note(int8)}",
    ]
    accuracy = int8.get("accuracy", {})
    if accuracy.get("reference_accuracy") is not None:
        lines.append(
            f"accuracy: top-1 {accuracy['reference_accuracy']:.2%} (fp32) -> {accuracy['candidate_accuracy']:.2%} (int8)"
        )
    if accuracy.get("top1_agreement") is not None:
        lines.append(f"top-1 agreement with fp32: {accuracy['top1_agreement']:.2%}")
    if accuracy.get("matched_boxes") is not None:
        lines.append(
            f"{boxes_sentence(accuracy, ('FP32', 'INT8'))}; score drift {accuracy.get('score_drift', 0.0):.4f}"
        )
    if accuracy.get("matched_boxes") is None:  # detection outputs come in NMS order: cosine means little
        for output in accuracy.get("outputs", []):
            lines.append(
                f"output {output['name']}: cosine {output['cosine']:.4f}, max abs error {output['max_abs_error']:.4g}"
            )
    for warning in int8.get("range_warnings", []):
        lines.append(f"range check: {warning['tensor']} ({warning['kind']}): {warning['detail']}")
    return lines


def _recipe_note(int8: dict[str, Any]) -> str:
    recipe = int8.get("recipe_float_nodes") or 0
    searched = len(int8.get("excluded_nodes", [])) - recipe
    if not recipe:
        return ""
    return f" ({recipe} by the detector recipe: its stem and post-processing{f'; {searched} by the search' if searched else ''})"


@click.command()
@model_argument
@profile_option
@precision_option
@int8_options
@click.option(
    "--batch",
    "batches",
    default="1",
    show_default=True,
    help=f"Comma-separated batch sizes, each 1..{MAX_BENCH_BATCH}.",
)
@click.option("--warmup", default=5, show_default=True, help=f"Untimed runs per batch size, 0..{MAX_WARMUP}.")
@click.option("--iterations", default=50, show_default=True, help=f"Timed runs per batch size, 1..{MAX_ITERATIONS}.")
@click.option(
    "--dynamic-size",
    default=320,
    show_default=True,
    help=f"Size given to dynamic non-batch axes, 1..{MAX_DYNAMIC_SIZE}.",
)
@click.option("--image", type=click.Path(path_type=Path, dir_okay=False), help="Feed this image to image inputs.")
@format_option(json_alias=True)
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
    output_format: OutputFormat,
    **int8: Any,
) -> None:
    """Latency p50/p99 and throughput per batch size, after warm-up."""
    try:
        batch_sizes = [int(b) for b in batches.split(",") if b.strip()]
    except ValueError:
        raise ConfigError(f"--batch: expected comma-separated integers like 1,2,4, got '{batches}'") from None
    # Bounds first, so a huge batch is one line and nothing is read, built or allocated.
    check_benchmark_arguments(batch_sizes, warmup, iterations, dynamic_size)
    frame = _read_image(image) if image else None
    request = engine_request(ctx, model, profile_name, precision, **int8)
    check_benchmark_arguments(batch_sizes, warmup, iterations, dynamic_size, request.model.inputs)
    profile = request.profile
    with progress_bars(ctx.err_console, enabled=output_format != "json"):
        prepared = request.prepare(ctx)
    with prepared.open() as runner:
        timings = benchmark_engine(runner, batch_sizes, warmup, iterations, dynamic_size, frame)
    if output_format == "json":
        payload = {"model": str(model), "profile": profile.name, "precision": prepared.precision}
        click.echo(json.dumps(payload | {"results": [t.to_dict() for t in timings]}, indent=2))
        return
    columns = ("batch", "p50 ms", "p99 ms", "mean ms", Column("items/s", "throughput"))
    rows = [(t.batch, f"{t.p50_ms:.2f}", f"{t.p99_ms:.2f}", f"{t.mean_ms:.2f}", f"{t.throughput:.1f}") for t in timings]
    ctx.listing(output_format).table(columns, rows, title=f"{model.name} on {profile.name}")


def _read_image(path: Path) -> np.ndarray:
    from edge_sdk.core.opencv import import_cv2

    image = import_cv2().imread(str(path))
    if image is None:
        raise SourceError(f"cannot read image {path}")
    return image


@click.group()
def cache() -> None:
    """The engine cache: list, inspect, remove, verify entries."""


@cache.command("ls")
@format_option(json_alias=True)
@pass_cli
def cache_ls(ctx: CliContext, output_format: OutputFormat) -> None:
    """Entries with their model, profile, backend and state; then what else lies in the folder."""
    reports = verify_cache(ctx.cache)
    if output_format == "json":
        rows = [{"digest": r.digest, "problem": r.problem, "removable": r.removable, **r.manifest} for r in reports]
        click.echo(json.dumps(rows, indent=2))
        _echo_not_entries(ctx.cache.not_entries(), err=True)
        return
    out = ctx.listing(output_format)
    columns = ("digest", "model", "profile", "backend", "precision", "built", "gate", "state")
    # On a terminal the table shows a digest's first 12 characters (a prefix `cache rm` takes); piped or
    # in tsv it is whole.
    short = output_format == "table" and ctx.console.is_terminal
    out.table(columns, [_cache_row(r, short) for r in reports], title=str(ctx.cache.root))
    _echo_not_entries(ctx.cache.not_entries(), err=output_format != "table")


def _cache_row(report: EntryReport, short_digest: bool) -> list[Cell]:
    key = report.manifest.get("key", {})
    model = Path(str(report.manifest.get("facts", {}).get("model_path", "?"))).name
    backend = f"{key.get('backend', '?')} {key.get('backend_version', '')}".strip()
    return [
        report.digest[:12] if short_digest else report.digest,
        model,
        str(key.get("profile_name", "?")),
        backend,
        str(key.get("precision", "?")),
        str(report.manifest.get("built_at", "?")),
        _gate_cell(report.manifest),
        report.problem or "ok",
    ]


def _gate_cell(manifest: dict[str, Any]) -> str:
    """The equivalence gate's outcome in a few words: its task metric, and whether the fold fell back."""
    gate = manifest.get("facts", {}).get("equivalence")
    if not isinstance(gate, dict):
        return "not run"
    report = gate.get("report", {})
    if report.get("matched_boxes") is not None:
        measure = f"boxes {report['matched_boxes']:.0%}"
    elif report.get("top1_agreement") is not None:
        measure = f"top-1 {report['top1_agreement']:.0%}"
    else:
        cosines = [output.get("cosine", 0.0) for output in report.get("outputs", [])]
        measure = f"cos {min(cosines):.4f}" if cosines else ""
    state = "passed" if gate.get("passed") else "failed"
    return f"{state} {measure}{', unfolded' if gate.get('fold_fallback') else ''}".strip()


@cache.command("inspect")
@click.argument("digest")
@click.option("--json", "as_json", is_flag=True, help="Print the whole manifest as JSON.")
@pass_cli
def cache_inspect(ctx: CliContext, digest: str, as_json: bool) -> None:
    """What one entry holds: its key, what its build learned (for TensorRT: the target, the build plan and the
    DLA placement report), its equivalence gate."""
    report = ctx.cache.find(digest)
    if as_json:
        click.echo(json.dumps(report.manifest, indent=2))
        return
    key, facts = report.manifest.get("key", {}), report.manifest.get("facts", {})
    click.echo(f"{report.digest}: {report.problem or 'ok'}")
    for name in ("profile_name", "backend", "backend_version", "precision", "device_identity", "input_shapes"):
        click.echo(f"  {name}: {key.get(name)}")
    backend = key.get("backend")
    if isinstance(backend, str) and backend in BACKENDS:
        for line in BACKENDS[backend].describe_facts(facts):
            click.echo(f"  {line}")
    for name in ("providers_used", "nodes_before", "nodes_after"):
        if name in facts:
            click.echo(f"  {name}: {in_words(facts[name])}")
    if "int8" in facts:
        for line in describe_int8(facts["int8"]):
            click.echo(f"  {line}")
    click.echo(f"  equivalence gate: {_gate_cell(report.manifest)}")


@cache.command("rm")
@click.argument("digest", required=False)
@click.option("--all", "remove_all", is_flag=True, help="Remove every entry the SDK built.")
@click.option("--stale", is_flag=True, help="Remove entries that are corrupt or built by another backend version.")
@pass_cli
def cache_rm(ctx: CliContext, digest: str | None, remove_all: bool, stale: bool) -> None:
    """Remove the entry DIGEST (a unique prefix of 4 or more characters), --stale ones, or --all.

    Only folders whose manifest the SDK wrote are touched; anything else in the cache folder is listed and
    left alone. Lock files and staging folders of failed or killed builds are cleaned up as well.
    """
    engine_cache = ctx.cache
    if sum((digest is not None, remove_all, stale)) != 1:
        raise ConfigError("cache rm: give exactly one of DIGEST, --stale or --all")
    if digest is not None:
        removal = engine_cache.remove(digest)
    elif stale:
        removal = engine_cache.remove_entries([report for report in verify_cache(engine_cache) if report.problem])
    else:
        removal = engine_cache.remove_all()
    count = len(removal.removed)
    click.echo(f"removed {count} entr{'y' if count == 1 else 'ies'}")
    if removal.leftovers:
        click.echo(f"cleaned {removal.leftovers} lock file(s) or staging folder(s) of failed or killed builds")
    for busy in removal.busy:
        click.echo(f"being built, left alone: {busy[:12]}")
    _echo_not_entries(removal.left_alone)


@cache.command("verify")
@pass_cli
def cache_verify(ctx: CliContext) -> None:
    """Check every entry's files against their hashes and backend version; exit 1 if any is bad."""
    reports = verify_cache(ctx.cache)
    bad = [r for r in reports if r.problem]
    for r in bad:
        click.echo(f"{r.digest[:12]}: {r.problem}")
    _echo_not_entries(ctx.cache.not_entries())
    click.echo(f"{len(reports) - len(bad)} ok, {len(bad)} bad in {ctx.cache.root}")
    if bad:
        raise SystemExit(1)


def _echo_not_entries(items: Iterable[NotAnEntry], err: bool = False) -> None:
    for item in items:
        click.echo(f"not an engine entry, left alone: {item.path} ({item.reason})", err=err)
