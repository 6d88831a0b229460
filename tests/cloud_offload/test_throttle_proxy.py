"""The offload test bed's slow link (tools/harness/throttle_proxy.py) over real loopback sockets: it
limits bandwidth, adds delay, stalls, cuts and follows a schedule. Bounds are one-sided where load can
only make things slower."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tools.harness.throttle_proxy import LinkShape, ThrottlingProxy


@pytest.fixture
def echo_server() -> Iterator[tuple[str, int]]:
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=echo, args=(connection,), daemon=True).start()

    def echo(connection: socket.socket) -> None:
        with connection, contextlib.suppress(OSError):
            while data := connection.recv(65536):
                connection.sendall(data)

    threading.Thread(target=serve, daemon=True).start()
    yield listener.getsockname()
    listener.close()


def round_trip(port: int, nbytes: int, timeout: float = 20.0) -> float:
    """Seconds to send `nbytes` through the proxy to the echo server and read them back."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as client:
        started = time.monotonic()
        sender = threading.Thread(target=client.sendall, args=(b"x" * nbytes,), daemon=True)
        sender.start()
        received = 0
        while received < nbytes:
            chunk = client.recv(65536)
            if not chunk:
                raise ConnectionError(f"closed after {received} of {nbytes} bytes")
            received += len(chunk)
        return time.monotonic() - started


def test_bandwidth_limits_the_transfer(echo_server: tuple[str, int]) -> None:
    with ThrottlingProxy(echo_server, LinkShape(bandwidth_bps=8e6)) as proxy:  # 1 MB/s each way
        seconds = round_trip(proxy.port, 500_000)
    assert seconds >= 0.4, f"500 KB at 1 MB/s takes about 0.5 s, took {seconds:.2f}"


@pytest.mark.parametrize("bandwidth_bps", [None, 80e6])
def test_the_proxy_counts_the_bytes_it_carries_each_way(
    echo_server: tuple[str, int], bandwidth_bps: float | None
) -> None:
    with ThrottlingProxy(echo_server, LinkShape(bandwidth_bps=bandwidth_bps)) as proxy:
        round_trip(proxy.port, 100_000)
        round_trip(proxy.port, 20_000)
        assert (proxy.bytes_up, proxy.bytes_down) == (120_000, 120_000)


def test_delay_is_added_each_way(echo_server: tuple[str, int]) -> None:
    with ThrottlingProxy(echo_server, LinkShape(delay_s=0.05)) as proxy:
        seconds = round_trip(proxy.port, 10)
    assert seconds >= 0.1, f"two 50 ms legs, took {seconds:.3f}"


def test_a_schedule_changes_the_link_while_it_runs(echo_server: tuple[str, int]) -> None:
    with ThrottlingProxy(echo_server) as proxy:
        fast = round_trip(proxy.port, 200_000)
        proxy.follow([(0.0, {"bandwidth_bps": 1.6e6})]).join()  # 200 KB/s
        slow = round_trip(proxy.port, 200_000)
    assert slow >= 0.8 and slow > 5 * fast, (fast, slow)


def test_a_stall_holds_bytes_until_resume_and_loses_none(echo_server: tuple[str, int]) -> None:
    with ThrottlingProxy(echo_server) as proxy:
        proxy.stall()
        threading.Timer(0.3, proxy.resume).start()
        seconds = round_trip(proxy.port, 50_000)
    assert seconds >= 0.25


def test_a_cut_drops_connections_and_refuses_new_ones_until_restored(echo_server: tuple[str, int]) -> None:
    with ThrottlingProxy(echo_server) as proxy:
        client = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        assert round_trip(proxy.port, 100) < 5
        proxy.cut()
        with client, pytest.raises((ConnectionError, OSError)):
            client.sendall(b"x")
            if not client.recv(1):
                raise ConnectionError("closed")
        with pytest.raises(ConnectionError):
            round_trip(proxy.port, 100, timeout=2)
        proxy.restore()
        assert round_trip(proxy.port, 100) < 5
