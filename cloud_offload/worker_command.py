"""`edge-sdk offload worker`: serve the models of some pipelines to edge devices until SIGTERM / SIGINT."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from pathlib import Path

import click

from edge_sdk.cli.context import CliContext
from edge_sdk.engines.cache import EngineCache
from edge_sdk.fleet.wire.broker_file import load_broker_file
from edge_sdk.pipeline.config import PipelineConfig, load_pipeline
from edge_sdk.serving.model_cache import ModelCacheSettings

from .cli import offload
from .protocol import DEFAULT_GROUP
from .triton_runner import TritonSettings, triton_preparer, triton_settings
from .triton_tails import parse_tails, triton_tails
from .worker import OffloadWorker, WorkerSettings
from .worker_models import prepare_model
from .worker_residency import EVENTS_LOGGER
from .worker_tails import SplitTails


def _model_cache(memory_mb: float | None, pinned: tuple[str, ...], min_residency_s: float) -> ModelCacheSettings | None:
    if memory_mb is None:
        if pinned:
            raise click.UsageError("--pin needs --model-memory-mb (without a budget every model stays loaded)")
        return None
    return ModelCacheSettings(memory_mb=memory_mb, pinned=pinned, min_residency_s=min_residency_s)


_DEFAULTS = WorkerSettings(worker_id="defaults")
_CACHE_DEFAULTS = ModelCacheSettings(memory_mb=1)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@offload.command("worker")
@click.option(
    "--broker",
    "broker_file",
    required=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="Broker settings file (host, port, TLS with the worker's own certificate, credentials).",
)
@click.option("--profile", "profile_name", help="This machine's device profile (default: detected).")
@click.option(
    "--pipeline",
    "pipeline_files",
    multiple=True,
    required=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="A pipeline whose model this worker serves (repeat for several).",
)
@click.option("--id", "worker_id", help="The worker's name (default: the broker file's client id, else host-pid).")
@click.option("--group", default=DEFAULT_GROUP, show_default=True, help="The workers' shared-subscription group.")
@click.option(
    "--batch-size",
    type=click.IntRange(1, 256),
    default=_DEFAULTS.batch_size,
    show_default=True,
    help="Requests per call.",
)
@click.option(
    "--batch-delay-ms",
    type=click.FloatRange(0, 1000),
    default=_DEFAULTS.batch_delay_ms,
    show_default=True,
    help="Longest wait for a batch to fill.",
)
@click.option(
    "--latency-slo-ms",
    type=click.FloatRange(0, 60_000, min_open=True),
    help="p99 target from a request's arrival to its answer: batch size (up to --batch-size) and delay follow "
    "measured latency and arrival rate, and requests that cannot meet it are answered 'shed'.",
)
@click.option(
    "--queue-size",
    type=click.IntRange(1),
    default=_DEFAULTS.queue_size,
    show_default=True,
    help="Requests waiting at most; beyond, each is answered 'worker overloaded' at once.",
)
@click.option("--threads", type=click.IntRange(1), help="Threads per inference (default: the profile's).")
@click.option(
    "--answer-precision",
    type=click.Choice(["fp32", "fp16"]),
    default=_DEFAULTS.answer_precision,
    show_default=True,
    help="Float outputs are answered as this.",
)
@click.option(
    "--model-memory-mb",
    type=click.FloatRange(min=0, min_open=True),
    help="Keep only the models this many MB of engine files hold loaded (LRU with pinning and a minimum "
    "residency); a request for another is answered 'model loading' at once while it loads. Default: all loaded.",
)
@click.option(
    "--pin",
    "pinned",
    multiple=True,
    metavar="MODEL",
    help="With --model-memory-mb: a model always loaded (a pipeline's name or a model key; repeat for several).",
)
@click.option(
    "--min-residency-s",
    type=click.FloatRange(min=0),
    default=_CACHE_DEFAULTS.min_residency_s,
    show_default=True,
    help="With --model-memory-mb: a model loaded less than this ago is evicted only for one asked for more "
    "often; also the window requests are counted over. 0: plain LRU.",
)
@click.option(
    "--triton",
    "triton_url",
    metavar="URL",
    help="Forward whole-model requests to this Triton Inference Server (grpc://HOST[:PORT] or "
    "http://HOST[:PORT]) instead of running the models here; frames are decoded and preprocessed here. "
    "Needs edge-sdk[triton].",
)
@click.option(
    "--triton-model",
    "triton_models",
    multiple=True,
    metavar="PIPELINE=MODEL",
    help="With --triton: the Triton model serving a pipeline (default: the pipeline's name; repeat for several).",
)
@click.option(
    "--triton-tail",
    "triton_tail_items",
    multiple=True,
    metavar="PIPELINE:TENSOR=MODEL",
    help="With --triton: Triton computes the tail of PIPELINE's cut at TENSOR (its largest tensor, as "
    "offload.cuts names it) as MODEL (`edge-sdk offload export-tail` writes it); repeat for several. With "
    "tails and no --triton-model, whole models run here.",
)
@click.option(
    "--triton-timeout-s",
    type=click.FloatRange(0, 600, min_open=True),
    default=TritonSettings.model_fields["timeout_s"].default,
    show_default=True,
    help="With --triton: the longest wait for one Triton call; past it the requests are answered an error.",
)
@click.pass_context
def worker(
    click_ctx: click.Context,
    broker_file: Path,
    profile_name: str | None,
    pipeline_files: tuple[Path, ...],
    worker_id: str | None,
    group: str,
    batch_size: int,
    batch_delay_ms: float,
    latency_slo_ms: float | None,
    queue_size: int,
    threads: int | None,
    answer_precision: str,
    model_memory_mb: float | None,
    pinned: tuple[str, ...],
    min_residency_s: float,
    triton_url: str | None,
    triton_models: tuple[str, ...],
    triton_tail_items: tuple[str, ...],
    triton_timeout_s: float,
) -> None:
    """Serve the models of the pipelines to edge devices over MQTT: whole models on frames, tails on a
    split's tensors. Several workers of one group share the requests. Ctrl-C or SIGTERM answers what is
    queued, clears the worker's load report and stops."""
    ctx = click_ctx.find_object(CliContext) or CliContext()
    events = logging.getLogger(EVENTS_LOGGER)
    if events.getEffectiveLevel() > logging.INFO:  # the model cache's loads and evictions are the operator's to see
        events.setLevel(logging.INFO)
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    previous = {signum: signal.signal(signum, on_signal) for signum in STOP_SIGNALS}
    try:
        broker = load_broker_file(broker_file)
        settings = WorkerSettings.model_validate(
            {
                "worker_id": worker_id or broker.client_id or f"{socket.gethostname()}-{os.getpid()}",
                "group": group,
                "batch_size": batch_size,
                "batch_delay_ms": batch_delay_ms,
                "latency_slo_ms": latency_slo_ms,
                "queue_size": queue_size,
                "threads": threads,
                "answer_precision": answer_precision,
                "model_cache": _model_cache(model_memory_mb, pinned, min_residency_s),
            }
        )
        pipelines = [load_pipeline(path) for path in pipeline_files]
        profile = ctx.profile(profile_name)
        triton = triton_settings(
            triton_url, triton_models, triton_timeout_s, pipelines, parse_tails(triton_tail_items, pipelines)
        )
        tails = SplitTails(pipelines, profile, ctx.cache, threads)
        serving = OffloadWorker(
            pipelines,
            profile,
            broker,
            settings,
            ctx.cache,
            tail_builder=tails,
            prepare_model=triton_preparer(triton, ctx.cache, lambda config: prepare_model(config, profile, ctx.cache))
            if triton
            else None,
        )
        name = settings.worker_id
        click.echo(f"offload worker {name}: loading {len(pipelines)} model(s) for profile {profile.name}")
        serving.start()
        loaded = serving.models.stats()
        for key, pipeline in serving.models.names().items():
            kept = "" if loaded is None or key in loaded.resident else " (not loaded until asked for)"
            remote = (
                f" through Triton at {triton.url} (model {triton.model_for(pipeline)})"
                if triton and triton.forwards_whole(pipeline)
                else ""
            )
            click.echo(f"offload worker {name}: serving {pipeline} as model {key}{kept}{remote}")
            remote_tails = _triton_tails(serving, key, pipeline, triton, ctx.cache, pipelines)
            for part, model in remote_tails.items():
                click.echo(f"offload worker {name}: tail {part} of {pipeline} through Triton (model {model})")
            for part in tails.useful(key):  # the tails an edge picks with cuts: auto, ready before "ready"
                if stop.is_set():
                    break
                if part in remote_tails:
                    continue
                tail = tails(key, part)
                if tail is not None:
                    serving.add_tail(key, part, tail)
        click.echo(f"offload worker {name}: ready on {broker.address}, group {settings.group}")
        try:
            stop.wait()
        finally:
            stats = serving.stop()
            tails.close()
        click.echo(f"offload worker {name}: stopped; {stats.line()}")
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _triton_tails(
    serving: OffloadWorker,
    key: str,
    pipeline: str,
    triton: TritonSettings | None,
    cache: EngineCache,
    pipelines: list[PipelineConfig],
) -> dict[str, str]:
    """Serve the pipeline's --triton-tail cuts through Triton: part name -> Triton model."""
    cuts = triton.tails.get(pipeline, {}) if triton else {}
    if not cuts or triton is None:
        return {}
    config = next(config for config in pipelines if config.name == pipeline)
    served = {}
    for part, (model, tail) in triton_tails(config, cuts, triton, cache).items():
        serving.add_tail(key, part, tail)
        served[part] = model
    return served
