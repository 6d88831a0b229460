"""What a user reads of a running pipeline's snapshot: the Prometheus endpoint and the --stats view."""

from __future__ import annotations

import socket
import urllib.request

import pytest
from rich.console import Console

from edge_sdk.cli.stats_view import render_snapshot
from edge_sdk.pipeline.snapshot import RuntimeSnapshot


def scraped_metrics(snapshot: RuntimeSnapshot) -> str:
    """The /metrics text of a PrometheusExporter on a free port, updated with `snapshot`."""
    pytest.importorskip("prometheus_client")
    from edge_sdk.pipeline.prometheus import PrometheusExporter

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    exporter = PrometheusExporter(port, "127.0.0.1")
    try:
        exporter.update(snapshot)
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    finally:
        exporter.close()


def stats_text(snapshot: RuntimeSnapshot, width: int = 160) -> str:
    """The --stats view of `snapshot` as plain text."""
    console = Console(width=width, record=True)
    console.print(render_snapshot(snapshot))
    return console.export_text()
