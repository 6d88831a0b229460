"""`edge-sdk offload export-tail`: the tail of a pipeline's cut as an ONNX model for a Triton model
repository, with the part name edges ask for it by (docs/offload.md, "Forwarding to a Triton Inference
Server")."""

from __future__ import annotations

from pathlib import Path

import click

from edge_sdk.cli.context import CliContext
from edge_sdk.pipeline.config import load_pipeline

from .cli import offload
from .triton_tails import export_tail


@offload.command("export-tail")
@click.argument("pipeline_file", metavar="PIPELINE", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@click.option(
    "--cut",
    "tensor",
    required=True,
    metavar="TENSOR",
    help="The cut, by its largest tensor (as offload.cuts names it; `edge-sdk offload plan` lists them).",
)
@click.option("--out", "out_path", required=True, type=click.Path(path_type=Path, dir_okay=False), help="ONNX file.")
@click.pass_context
def export_tail_command(click_ctx: click.Context, pipeline_file: Path, tensor: str, out_path: Path) -> None:
    """Write the tail of PIPELINE's cut at TENSOR as ONNX, for a Triton model repository: the graph an
    offload worker would build for that part. Serve it on Triton and start the worker with
    --triton URL --triton-tail PIPELINE:TENSOR=MODEL."""
    ctx = click_ctx.find_object(CliContext) or CliContext()
    config = load_pipeline(pipeline_file)
    candidate = export_tail(config, tensor, ctx.cache, out_path)
    tensors = ", ".join(candidate.measured.cut.tensors)
    click.echo(f"wrote {out_path}: the tail of {config.name} after {tensors} (part {candidate.part})")
    click.echo(
        f"serve it on Triton, then: edge-sdk offload worker ... --triton URL --triton-tail {config.name}:{tensor}=MODEL"
    )
