"""`edge-sdk offload status`: the workers and offloading devices a broker knows of now.

Workers keep their load on retained topics, so they show at once; a device shows once its agent's
next probe (its offload counters, on `edge/<device>/telemetry/offload`, about every second while it
runs) arrives within `--wait`.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import click
from pydantic import ValidationError

from edge_sdk.cli.context import CliContext
from edge_sdk.cli.output_format import OutputFormat, format_option
from edge_sdk.fleet.wire.broker_file import load_broker_file
from edge_sdk.mqtt import MqttClient
from edge_sdk.mqtt.messages import Message
from edge_sdk.mqtt.topics import ROOT

from .cli import offload
from .protocol import LOAD_ROOT, WorkerLoad

DEVICE_FILTER = f"{ROOT}/+/telemetry/offload"


@offload.command("status")
@click.option(
    "--broker",
    "broker_file",
    required=True,
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="Broker settings file (an operator's or a worker's).",
)
@click.option(
    "--wait", "wait_s", type=click.FloatRange(min=0), default=2.0, show_default=True, help="Seconds to listen."
)
@format_option(json_alias=True)
@click.pass_obj
def status(ctx: CliContext, broker_file: Path, wait_s: float, output_format: OutputFormat) -> None:
    """Show the offload workers (profile, models, queue, load) and the devices offloading (mode, where
    their frames were computed, link estimate, fallbacks)."""
    workers: dict[str, WorkerLoad] = {}
    devices: dict[str, dict[str, Any]] = {}
    lock = threading.Lock()

    def on_load(message: Message) -> None:
        if not message.payload:
            return
        try:
            load = WorkerLoad.model_validate_json(message.payload)
        except ValidationError:
            return
        with lock:
            workers[load.worker] = load

    def on_device(message: Message) -> None:
        try:
            counters = json.loads(message.payload)
        except ValueError:
            return
        if isinstance(counters, dict):
            counters.pop("padding", None)
            with lock:
                devices[message.topic.split("/")[1]] = counters

    client = MqttClient(load_broker_file(broker_file))
    client.connect()
    try:
        client.subscribe(f"{LOAD_ROOT}/+", on_load)
        client.subscribe(DEVICE_FILTER, on_device)
        time.sleep(wait_s)
    finally:
        client.disconnect()
    now = time.time()
    with lock:
        worker_rows = [_worker_row(load, now) for _name, load in sorted(workers.items())]
        device_rows = [_device_row(name, counters) for name, counters in sorted(devices.items())]
    listing = ctx.listing(output_format)
    if output_format == "json":
        document = {
            "workers": [load.model_dump(mode="json") for _name, load in sorted(workers.items())],
            "devices": {name: counters for name, counters in sorted(devices.items())},
        }
        click.echo(json.dumps(document, indent=2))
        return
    listing.table(
        ["worker", "profile", "models", "cache", "queue", "queue ms", "busy", "served", "age s"],
        worker_rows,
        title="workers",
    )
    listing.table(
        ["device", "mode", "computed", "link Mbit/s", "rtt ms", "fallbacks", "late"], device_rows, title="devices"
    )
    if not workers:
        listing.line(f"no worker reports on {broker_file} (start one: edge-sdk offload worker)")


def _worker_row(load: WorkerLoad, now: float) -> list[Any]:
    models = [
        f"{key} (whole {times.whole_ms:.0f} ms, {len(times.tails_ms)} tails)"
        if times.whole_ms is not None
        else f"{key} ({len(times.tails_ms)} tails)"
        for key, times in load.models.items()
    ]
    return [
        load.worker,
        load.profile,
        models,
        _cache_cell(load),
        load.queue,
        round(load.queue_ms, 1),
        f"{load.busy:.0%}",
        load.served,
        round(now - load.at, 1),
    ]


def _cache_cell(load: WorkerLoad) -> str:
    """The hot-model cache in one cell: what is loaded of what is served, the hit rate, loads, evictions, MB."""
    cache = load.cache
    if cache is None:
        return "all loaded"
    return (
        f"{len(cache.resident)}/{len(load.models)} loaded, hit {cache.hit_rate:.0%}, {cache.loads} loads, "
        f"{cache.evictions} evictions, {cache.used_mb:.1f}/{cache.budget_mb:g} MB"
    )


def _device_row(name: str, counters: dict[str, Any]) -> list[Any]:
    def counted(key: str) -> str:
        values = counters.get(key) or {}
        return ", ".join(f"{where} {count}" for where, count in values.items()) if isinstance(values, dict) else ""

    return [
        name,
        counters.get("mode"),
        counted("computed"),
        counters.get("bandwidth_mbps"),
        counters.get("rtt_ms"),
        counted("fallbacks"),
        counters.get("late_answers"),
    ]
