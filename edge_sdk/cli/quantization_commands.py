"""`edge-sdk compare` (two engines on the same inputs) and `edge-sdk sensitivity` (per-layer INT8 impact)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.markup import escape

from .context import CliContext
from .output_format import Column, Listing, OutputFormat, format_option
from .progress_view import progress_bars

if TYPE_CHECKING:
    from edge_sdk.backends.calibration import Calibration
    from edge_sdk.backends.calibration.setup import TaskKind
    from edge_sdk.backends.int8.accuracy import AccuracyReport
    from edge_sdk.backends.int8.range_check import RangeWarning
    from edge_sdk.backends.int8.sensitivity import SensitivityAnalysis
    from edge_sdk.core.model_file import ModelFile
    from edge_sdk.engines.compare import EngineComparison
    from edge_sdk.pipeline.config import PipelineConfig
    from edge_sdk.profiles import DeviceProfile

pass_cli = click.make_pass_decorator(CliContext)
data_option = click.option(
    "--data",
    type=click.Path(path_type=Path, exists=True),
    required=True,
    help="Inputs: a folder of images, a video, or an .npz (arrays by input name, optional labels).",
)
task_option = click.option(
    "--task",
    type=click.Choice(["classification", "detection", "generic"]),
    help="How accuracy is measured. Default: from --pipeline's postprocess, else detection when the model's "
    "outputs look like a detector's (SSD detections, a YOLO head), else classification when the data has "
    "labels, else generic (cosine per output).",
)
pipeline_option = click.option(
    "--pipeline",
    "pipeline_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Pipeline YAML: its preprocessing feeds the model (folded into built engines as a run would) and its "
    "postprocess defines the task.",
)
limit_option = click.option("--limit", type=click.IntRange(min=1), help="Use at most this many samples.")


@click.command()
@click.argument("engine_a")
@click.argument("engine_b")
@data_option
@task_option
@pipeline_option
@click.option("--calib", type=click.Path(path_type=Path, exists=True), help="Calibration data for int8 specs.")
@limit_option
@click.option(
    "--min-cosine",
    type=click.FloatRange(0.0, 1.0),
    help="Exit 1 when an output's cosine is below this (not for detection: its raw outputs are in NMS order).",
)
@click.option(
    "--max-drop",
    type=click.FloatRange(min=0.0),
    help="Exit 1 when B loses more points than this: top-1 accuracy (or agreement) or matched boxes.",
)
@format_option(json_alias=True)
@pass_cli
def compare(
    ctx: CliContext,
    engine_a: str,
    engine_b: str,
    data: Path,
    task: TaskKind | None,
    pipeline_path: Path | None,
    calib: Path | None,
    limit: int | None,
    min_cosine: float | None,
    max_drop: float | None,
    output_format: OutputFormat,
) -> None:
    """Run ENGINE_A and ENGINE_B on the same inputs and compare B with A, per output.

    \b
    An engine is one of:
      MODEL.onnx                      the reference: ONNX Runtime CPU, fp32, no graph optimisation
      MODEL.onnx@PROFILE[:PRECISION]  the SDK's engine for that profile (built first if not cached)
      MODEL.onnx:PRECISION            the same, for the detected profile
      DIGEST                          a cached engine (a unique prefix from `edge-sdk cache ls`)
    Exits 1 when B misses --min-cosine or --max-drop (a check to run before a rollout).
    """
    from edge_sdk.engines.compare import CompareSetup, compare_engines, parse_engine_spec

    spec_a, spec_b = parse_engine_spec(engine_a), parse_engine_spec(engine_b)
    pipeline = _load_pipeline(pipeline_path)
    setup = CompareSetup(
        catalog=ctx.catalog,
        cache=ctx.cache,
        task=task,
        postprocess=pipeline.postprocess if pipeline else None,
        preprocess=pipeline.preprocess if pipeline else None,
        input_name=pipeline.model.input if pipeline else None,
        limit=limit,
        calibration=_calibration_factory(calib, pipeline, task),
    )
    with progress_bars(ctx.err_console, enabled=output_format != "json"):
        result = compare_engines(spec_a, spec_b, data, setup)
    if result.task_note and output_format != "json":
        ctx.err_console.print(escape(result.task_note))
    failures = result.failures(min_cosine, max_drop)
    if output_format == "json":
        thresholds = {"min_cosine": min_cosine, "max_drop": max_drop}
        click.echo(json.dumps(result.to_dict() | thresholds | {"failures": failures}, indent=2))
    else:
        out = ctx.listing(output_format)
        _print_comparison(out, result)
        if min_cosine is not None and result.report.task == "detection":
            out.line("note: --min-cosine is not checked for detection (raw outputs come in NMS order)")
        for failure in failures:
            out.line(f"[red]FAIL[/red] {escape(failure)}")
        if (min_cosine is not None or max_drop is not None) and not failures:
            out.line("[green]PASS[/green] B is within the thresholds")
    if failures:
        raise SystemExit(1)


def _print_comparison(out: Listing, result: EngineComparison) -> None:
    out.line(f"A: {escape(result.a)}")
    out.line(f"B: {escape(result.b)}")
    out.table(
        ("output", "cosine", "max abs error", "mean abs error"),
        [
            (d.name, f"{d.cosine:.6f}", f"{d.max_abs_error:.6g}", f"{d.mean_abs_error:.6g}")
            for d in result.report.outputs
        ],
    )
    out.line(f"samples: {result.samples}")
    for line in _task_lines(result.report):
        out.line(line)
    for label, names in result.outputs_only_in.items():
        out.line(f"not compared (only in {escape(label)}): {escape(', '.join(names))}")


def _task_lines(report: AccuracyReport) -> list[str]:
    lines = []
    if report.reference_accuracy is not None and report.candidate_accuracy is not None:
        drop = 100 * (report.reference_accuracy - report.candidate_accuracy)
        lines.append(
            f"top-1 accuracy: A {report.reference_accuracy:.2%}, B {report.candidate_accuracy:.2%} "
            f"(drop {drop:.2f} points)"
        )
    if report.top1_agreement is not None:
        lines.append(f"top-1 agreement: {report.top1_agreement:.2%}")
    if report.matched_boxes is not None:
        lines.append(f"{report.boxes_sentence(('A', 'B'))}; score drift {report.score_drift or 0.0:.4f}")
    return lines


@click.command()
@click.argument("model", type=click.Path(path_type=Path, dir_okay=False))
@data_option
@task_option
@pipeline_option
@click.option("--profile", "profile_name", help="Device profile whose int8 settings apply (default: detected).")
@click.option("--calib-method", type=click.Choice(["minmax", "entropy", "percentile"]), help="Default: the profile's.")
@limit_option
@click.option("--top", type=click.IntRange(min=1), help="Show (and plot) only the N most sensitive layers.")
@click.option("--plot", type=click.Path(path_type=Path, dir_okay=False), help="Write a PNG bar chart here.")
@format_option(json_alias=True)
@pass_cli
def sensitivity(
    ctx: CliContext,
    model: Path,
    data: Path,
    task: TaskKind | None,
    pipeline_path: Path | None,
    profile_name: str | None,
    calib_method: str | None,
    limit: int | None,
    top: int | None,
    plot: Path | None,
    output_format: OutputFormat,
) -> None:
    """Per-layer INT8 impact: quantise each layer of MODEL alone and measure what it costs against FP32.

    The data is split as an int8 build splits it (every k-th sample held out to measure, the rest
    calibrate). Also checks the calibrated activation ranges for saturation and lost precision.
    """
    from edge_sdk.backends.calibration import SampleSet, int8_settings, open_calibration_data
    from edge_sdk.backends.calibration.setup import implied_task
    from edge_sdk.backends.int8.sensitivity import analyse_sensitivity
    from edge_sdk.core.errors import ConfigError
    from edge_sdk.core.model_file import ModelFile

    pipeline = _load_pipeline(pipeline_path)
    model_file = ModelFile.load(model)
    profile = ctx.profile(profile_name)
    quantizer = profile.backend().int8
    if quantizer is None:
        raise ConfigError(f"profile '{profile.name}': backend {profile.engine.backend} has no INT8 quantiser")
    settings = int8_settings(profile.int8, method=calib_method)
    reader = open_calibration_data(
        data,
        model_file,
        pipeline.preprocess if pipeline else None,
        pipeline.model.input if pipeline else None,
        limit or settings.max_samples,
    )
    task_kind, task_note = implied_task(
        task, pipeline.postprocess if pipeline else None, reader.labels is not None, model_file.outputs
    )
    if task_note and output_format != "json":
        ctx.err_console.print(escape(task_note))
    with progress_bars(ctx.err_console, enabled=output_format != "json"):
        samples = SampleSet.from_reader(reader, model_file.inputs)
        analysis = analyse_sensitivity(model_file.path, samples, settings, task_kind, quantizer=quantizer)
    shown = analysis.layers[:top] if top else analysis.layers
    if plot is not None:
        from edge_sdk.backends.int8.sensitivity_plot import plot_sensitivity

        plot_sensitivity(shown, plot, title=f"{model.name}: INT8 sensitivity, each layer quantised alone")
    if output_format == "json":
        payload = analysis.to_dict()
        payload["layers"] = payload["layers"][: len(shown)]
        payload["plot"] = str(plot) if plot else None
        click.echo(json.dumps(payload, indent=2))
        return
    out = ctx.listing(output_format)
    _print_sensitivity(out, model.name, analysis, top)
    _print_range_warnings(out, analysis.range_warnings)
    if plot is not None:
        out.line(f"plot: {escape(str(plot))}")


def _print_sensitivity(out: Listing, model_name: str, analysis: SensitivityAnalysis, top: int | None) -> None:
    shown = analysis.layers[:top] if top else analysis.layers
    detection = any(layer.score_drift is not None for layer in shown)
    out.line(
        f"{escape(model_name)}: each layer quantised alone, most sensitive first "
        f"({len(shown)} of {len(analysis.layers)} layers)"
    )
    second = "score drift" if detection else "lowest cosine"
    rows = [
        (
            rank,
            layer.node,
            layer.op_type,
            f"{layer.metric_drop:.4g}",
            f"{layer.score_drift:.4f}" if detection and layer.score_drift is not None else f"{layer.cosine:.6f}",
        )
        for rank, layer in enumerate(shown, start=1)
    ]
    out.table((Column("#", "rank"), "layer", "op", analysis.metric, second), rows)
    out.line(f"all layers in int8: {analysis.metric} {analysis.full_int8_drop:.4g}")
    out.line(f"  {escape(analysis.full_int8.summary(('FP32', 'INT8')))}")
    out.line(f"calibrated on {analysis.calibration_samples} samples, measured on {analysis.held_out_samples} held out")


def _print_range_warnings(out: Listing, warnings: list[RangeWarning]) -> None:
    if not warnings:
        out.line("range check: no activation range would saturate or lose precision in int8")
        return
    out.line(f"range check: {len(warnings)} activation range(s) would saturate or lose precision in int8")
    out.table(("tensor", "problem", "detail"), [(w.tensor, w.kind, w.detail) for w in warnings])


def _load_pipeline(path: Path | None) -> PipelineConfig | None:
    if path is None:
        return None
    from edge_sdk.pipeline.config import load_pipeline

    return load_pipeline(path)


def _calibration_factory(
    calib: Path | None, pipeline: PipelineConfig | None, task: TaskKind | None
) -> Callable[[ModelFile, DeviceProfile], Calibration] | None:
    """How an int8 spec gets its Calibration: --calib with the profile's int8 settings, as `edge-sdk build` does."""
    if calib is None:
        return None
    from edge_sdk.backends.calibration import int8_settings, make_calibration

    def calibration(model: ModelFile, profile: DeviceProfile) -> Calibration:
        return make_calibration(
            calib,
            model,
            int8_settings(profile.int8),
            task,
            preprocess=pipeline.preprocess if pipeline else None,
            postprocess=pipeline.postprocess if pipeline else None,
            input_name=pipeline.model.input if pipeline else None,
        )

    return calibration
