"""The /metrics endpoint: a port it cannot listen on is one clear line, not an internal error."""

from __future__ import annotations

import errno
import socket
from collections.abc import Iterator

import pytest

from edge_sdk.core.errors import ConfigError
from edge_sdk.pipeline.prometheus import PrometheusExporter, listen_error
from tests.support.metrics import scraped_metrics, stats_text

pytest.importorskip("prometheus_client")


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port this test holds open on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_prometheus_exporter_when_port_is_in_use_raises_one_line(busy_port: int) -> None:
    # when
    with pytest.raises(ConfigError) as raised:
        PrometheusExporter(busy_port, "127.0.0.1")
    # then
    assert str(raised.value) == f"prometheus: port {busy_port} on 127.0.0.1 is in use"


def test_prometheus_exporter_when_port_is_free_serves_and_closes() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    exporter = PrometheusExporter(port, "127.0.0.1")
    exporter.close()
    # the port is free again: a second exporter can take it
    PrometheusExporter(port, "127.0.0.1").close()


@pytest.mark.parametrize(
    ("error", "fragment"),
    [
        (OSError(errno.EACCES, "Permission denied"), "port 80 on 127.0.0.1 needs privileges"),
        (OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address"), "is not one of this host's"),
        (socket.gaierror(-2, "Name or service not known"), "cannot resolve address '127.0.0.1'"),
        (OSError(errno.ENOBUFS, "No buffer space available"), "cannot listen on port 80 on 127.0.0.1"),
    ],
    ids=["privileged", "foreign-address", "unresolvable", "other"],
)
def test_listen_error_when_the_socket_fails_says_why_in_one_line(error: OSError, fragment: str) -> None:
    message = listen_error(80, "127.0.0.1", error)
    assert message.startswith("prometheus: ") and fragment in message and "\n" not in message, message


OFFLOAD = {
    "mode": "cloud",
    "computed": {"edge": 12, "cloud": 30},
    "fallbacks": {"deadline": 2},
    "late_answers": 1,
    "bandwidth_mbps": 19.5,
    "rtt_ms": 21.0,
    "cloud_ms": {"cloud": 14.2},
    "throughput_share": 0.4,
}


def test_an_offloading_stage_shows_its_mode_share_link_and_cloud_time_in_metrics_and_stats() -> None:
    from edge_sdk.pipeline.snapshot import RuntimeSnapshot, StageView

    stage = StageView("inference:0", "inference", pid=1, frames=42, state="running", offload=OFFLOAD)
    snapshot = RuntimeSnapshot([stage], {}, 10.0, 20.0, 5.0)
    metrics = scraped_metrics(snapshot)
    assert 'edge_sdk_offload_frames{computed_at="cloud",stage="inference:0"} 30.0' in metrics
    assert 'edge_sdk_offload_fallbacks{reason="deadline",stage="inference:0"} 2.0' in metrics
    assert 'edge_sdk_offload_link{quantity="bandwidth_mbps",stage="inference:0"} 19.5' in metrics
    assert 'edge_sdk_offload_throughput_share{stage="inference:0"} 0.4' in metrics
    text = stats_text(snapshot)
    assert "edge 12, cloud 30" in text and "19.5 Mbit/s" in text and "cloud 14 ms" in text and "deadline 2" in text
    assert "40% away" in text
