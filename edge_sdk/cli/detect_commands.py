"""`edge-sdk detect MODEL SOURCE`: run a model on a video, camera, stream or image folder without a
pipeline file. The pipeline is made from the model (pipeline/from_model.py) and run exactly as `run`
runs a file (pipeline_commands.run_and_report)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from edge_sdk.pipeline.config import PipelineConfig
from edge_sdk.pipeline.from_model import detect_document, guess_model, pipeline_from_document, write_pipeline_file

from .context import CliContext
from .pipeline_commands import pass_cli, run_and_report, run_options

DEFAULT_OUT = Path("build") / "detect"


@click.command()
@click.argument("model", type=click.Path(path_type=Path, dir_okay=False))
@click.argument("source")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Folder for the annotated video and the results as JSONL (default: build/detect/MODEL-NAME).",
)
@click.option(
    "--save-pipeline",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write the pipeline it runs to this YAML file; edge-sdk run FILE runs it again, and it is the place "
    "to correct a guess.",
)
@click.option(
    "--labels",
    help="Class names, comma-separated, or a text file with one per line (default: the model's metadata, if any).",
)
@click.option(
    "--threshold",
    type=click.FloatRange(0.0, 1.0, min_open=True),
    help="Lowest score kept (default: the post-processor's: 0.5 SSD, 0.25 YOLO, 0 classifier).",
)
@click.option("--max-frames", type=click.IntRange(min=1), help="Stop after this many frames.")
@run_options
@pass_cli
def detect(
    ctx: CliContext,
    model: Path,
    source: str,
    out_dir: Path | None,
    save_pipeline: Path | None,
    labels: str | None,
    threshold: float | None,
    max_frames: int | None,
    profile_name: str | None,
    as_json: bool,
    as_jsonl: bool,
    stats: bool,
    show: bool,
) -> None:
    """Run MODEL (ONNX) on SOURCE without a pipeline file, writing an annotated video and JSONL results.

    SOURCE is a video file, a folder of images, a camera index (0) or /dev/videoN, an rtsp:// URL, or
    any source URI a pipeline file takes. The input layout, size and dtype and the post-processor
    (SSD, YOLOv5/v8, classifier) are read from the model, and what was guessed is said in one line.
    """
    out = out_dir or DEFAULT_OUT / model.stem
    say = ctx.err_console if as_json or as_jsonl else ctx.console

    def make_config() -> PipelineConfig:
        guess = guess_model(model, labels=_labels(labels))
        say.print(escape(guess.summary), soft_wrap=True)

        def document(base_dir: Path) -> dict[str, Any]:
            return detect_document(guess, source, out, base_dir, max_frames=max_frames, score_threshold=threshold)

        if save_pipeline is None:
            return pipeline_from_document(document(Path.cwd()), Path.cwd())
        comment = (
            f"Written by edge-sdk detect {model} {source}; what it guessed:\n{guess.summary}\n\n"
            f"Run it again with: edge-sdk run {save_pipeline} (add --show to watch it live)\n"
            "Correct preprocess: or postprocess: where the guess is wrong (docs/models.md)."
        )
        config = write_pipeline_file(document(save_pipeline.parent), save_pipeline, comment)
        say.print(f"pipeline written to {escape(str(save_pipeline))}", soft_wrap=True)
        return config

    run_and_report(ctx, make_config, profile_name, as_json=as_json, as_jsonl=as_jsonl, stats=stats, show=show)


def _labels(option: str | None) -> list[str] | None:
    """--labels as names: the lines of a file when it names one, else its comma-separated words."""
    if not option:
        return None
    path = Path(option).expanduser()
    if path.is_file():
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise click.BadParameter(f"cannot read {path}: {exc}", param_hint="--labels") from None
        return [line.strip() for line in text.splitlines() if line.strip()]
    if "," not in option and (path.suffix in (".txt", ".names", ".yaml", ".json") or "/" in option):
        raise click.BadParameter(
            f"{option}: no such file (give class names as a file, or as a,b,c)", param_hint="--labels"
        )
    return [name.strip() for name in option.split(",") if name.strip()]
