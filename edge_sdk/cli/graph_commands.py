"""`edge-sdk inspect MODEL`: what is in a model and what the graph passes of a build change."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import click
from rich.markup import escape

from edge_sdk.core.errors import ConfigError
from edge_sdk.core.tensor_meta import TensorMeta
from edge_sdk.graph.inspect import ModelSummary, load_model
from edge_sdk.graph.model_pass import PassReport
from edge_sdk.graph.optimize import optimize_graph
from edge_sdk.graph.options import GraphOptions

from .context import CliContext
from .output_format import Cell, Column, Listing, OutputFormat, Styled, format_option

pass_cli = click.make_pass_decorator(CliContext)


@click.command()
@click.argument("model", required=False, type=click.Path(path_type=Path, dir_okay=False))
@click.option(
    "--pipeline",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Use this pipeline's preprocessing (folded into the graph) and model input; MODEL defaults to its model.",
)
@click.option("--batch", help="Set the batch axis: a number, or 'dynamic'. Default: keep the model's.")
@format_option(json_alias=True)
@pass_cli
def inspect(
    ctx: CliContext, model: Path | None, pipeline: Path | None, batch: str | None, output_format: OutputFormat
) -> None:
    """Inputs, outputs, opset and op counts of MODEL, and what each graph pass of a build changes."""
    options, model = _graph_options(model, pipeline, batch)
    original = load_model(model)
    optimized, reports = optimize_graph(original, options)
    before, after = ModelSummary.of(original, model.name), ModelSummary.of(optimized, model.name)
    if output_format == "json":
        payload = {"model": before.to_dict(), "passes": [r.to_dict() for r in reports], "optimized": after.to_dict()}
        click.echo(json.dumps(payload, indent=2))
        return
    out = ctx.listing(output_format)
    out.line(_headline(before))
    _tensor_table(out, before, "model")
    if (after.inputs, after.outputs) != (before.inputs, before.outputs):
        _tensor_table(out, after, "after the graph passes")
    _op_table(out, before, after)
    _pass_table(out, reports, before.nodes, after.nodes)


def _graph_options(model: Path | None, pipeline: Path | None, batch: str | None) -> tuple[GraphOptions, Path]:
    preprocess, input_name = None, None
    if pipeline is not None:
        from edge_sdk.pipeline.config import load_pipeline

        config = load_pipeline(pipeline)
        model = model or config.model.path
        input_name = config.model.input
        preprocess = config.preprocess  # folded unless it says fold: false
    if model is None:
        raise ConfigError("inspect: expected a MODEL path or --pipeline PIPELINE.yaml, got neither")
    return GraphOptions(preprocess=preprocess, input_name=input_name, batch=_parse_batch(batch)), model


def _parse_batch(batch: str | None) -> int | Literal["keep"] | None:
    if batch is None:
        return "keep"
    if batch.strip().lower() == "dynamic":
        return None
    try:
        value = int(batch)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError(f"--batch: expected a positive integer or 'dynamic', got '{batch}'")
    return value


def _headline(summary: ModelSummary) -> str:
    nested = f" (+{summary.subgraph_nodes} in subgraphs)" if summary.subgraph_nodes else ""
    producer = f", producer {escape(summary.producer)}" if summary.producer else ""
    return (
        f"[bold]{escape(summary.name)}[/bold]: opset {summary.opset}, IR {summary.ir_version}{producer}, "
        f"{summary.nodes} nodes{nested}, {summary.initializers} initializers "
        f"({summary.initializer_bytes / 1e6:.1f} MB)"
    )


def _tensor_table(out: Listing, summary: ModelSummary, title: str) -> None:
    rows = [
        (kind, meta.name, meta.dtype.name, _shape(meta))
        for kind, metas in (("input", summary.inputs), ("output", summary.outputs))
        for meta in metas
    ]
    out.table((Column("", "kind"), "name", "dtype", "shape"), rows, title=title)


def _shape(meta: TensorMeta) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in meta.shape) + "]"


def _op_table(out: Listing, before: ModelSummary, after: ModelSummary) -> None:
    rows: list[tuple[Cell, ...]] = []
    for op in [*before.op_counts, *(op for op in after.op_counts if op not in before.op_counts)]:
        old, new = before.op_counts.get(op, 0), after.op_counts.get(op, 0)
        rows.append((op, old, new if new == old else Styled(str(new), "bold")))
    out.table(("op", "count", "after passes"), rows, title="ops (main graph)")


def _pass_table(out: Listing, reports: list[PassReport], nodes_before: int, nodes_after: int) -> None:
    rows = [(r.name, r.nodes_before, r.nodes_after, f"{r.seconds * 1000:.0f}", r.detail or "-") for r in reports]
    columns = ("pass", "nodes before", "nodes after", "ms", "what changed")
    out.table(columns, rows, title=f"graph passes: {nodes_before} -> {nodes_after} nodes")
