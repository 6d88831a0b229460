"""sd_notify without libsystemd, against a real AF_UNIX datagram socket (path and abstract name)."""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from edge_sdk.core import systemd_notify
from edge_sdk.core.systemd_notify import SystemdNotifier, socket_address, watchdog_interval
from tests.support.notify_socket import NotifySocket

WAIT_S = 10.0


@pytest.fixture
def notify(tmp_path: Path) -> Iterator[NotifySocket]:
    with NotifySocket.bind(tmp_path / "notify.sock") as listening:
        yield listening


def test_notifier_sends_ready_watchdog_stopping_and_status_as_sd_notify_lines(notify: NotifySocket) -> None:
    notifier = SystemdNotifier.from_environment({"NOTIFY_SOCKET": notify.address})
    assert notifier.enabled
    assert notifier.ready("started")
    assert notifier.watchdog()
    assert notifier.status("serving\n2 pipelines")
    assert notifier.stopping()
    notify.wait_for(lambda messages: len(messages) == 4, WAIT_S, "four messages")
    assert notify.snapshot() == [
        ["READY=1", "STATUS=started"],
        ["WATCHDOG=1"],
        ["STATUS=serving 2 pipelines"],
        ["STOPPING=1"],
    ]
    notifier.close()


def test_notifier_reaches_an_abstract_namespace_socket() -> None:
    with NotifySocket.bind_abstract(f"edge-sdk-test-{secrets.token_hex(4)}") as notify:
        assert notify.address.startswith("@")
        notifier = SystemdNotifier.from_environment({"NOTIFY_SOCKET": notify.address})
        assert notifier.ready()
        notify.wait_for(lambda messages: messages == [["READY=1"]], WAIT_S, "READY=1 on the abstract socket")
    assert socket_address("@name") == b"\0name"
    assert socket_address("/run/systemd/notify") == "/run/systemd/notify"


def test_notifier_without_notify_socket_is_a_no_op() -> None:
    notifier = SystemdNotifier.from_environment({"WATCHDOG_USEC": "30000000"})
    assert not notifier.enabled
    assert notifier.ping_interval is None, "no socket: nothing to ping"
    assert not notifier.ready() and not notifier.watchdog() and not notifier.watchdog_if_due()
    assert not notifier.stopping() and not notifier.status("x")


def test_watchdog_interval_comes_from_watchdog_usec_for_this_process_only() -> None:
    assert watchdog_interval({"WATCHDOG_USEC": "30000000"}) == 30.0
    assert watchdog_interval({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getpid())}) == 30.0
    assert watchdog_interval({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getpid() + 1)}) is None
    assert watchdog_interval({"WATCHDOG_USEC": "0"}) is None
    assert watchdog_interval({"WATCHDOG_USEC": "soon"}) is None
    assert watchdog_interval({}) is None
    notifier = SystemdNotifier.from_environment({"NOTIFY_SOCKET": "/x", "WATCHDOG_USEC": "30000000"})
    assert notifier.ping_interval == 15.0, "pings at half systemd's timeout"


def test_watchdog_if_due_pings_at_most_every_half_interval(notify: NotifySocket) -> None:
    now = [100.0]
    notifier = SystemdNotifier(notify.address, watchdog_seconds=10.0, clock=lambda: now[0])
    assert notifier.watchdog_if_due(), "the first call pings"
    now[0] += 4.9
    assert not notifier.watchdog_if_due(), "before half the interval: no ping"
    now[0] += 0.2
    assert notifier.watchdog_if_due(), "at half the interval: a ping"
    assert notifier.ready()
    now[0] += 1
    assert not notifier.watchdog_if_due(), "READY=1 counts as a ping"
    notify.wait_for(lambda messages: len(messages) == 3, WAIT_S, "three messages")
    assert notify.snapshot() == [["WATCHDOG=1"], ["WATCHDOG=1"], ["READY=1"]]


def test_notifier_when_the_socket_is_gone_logs_once_and_never_raises(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    notifier = SystemdNotifier(str(tmp_path / "missing.sock"), watchdog_seconds=1.0)
    with caplog.at_level(logging.WARNING, logger="edge_sdk.core.systemd_notify"):
        assert not notifier.ready()
        assert not notifier.watchdog()
        assert not notifier.stopping()
    warnings = [r for r in caplog.records if "cannot notify systemd" in r.getMessage()]
    assert len(warnings) == 1, caplog.text
    assert not SystemdNotifier("@" + "x" * 200).ready(), "an abstract name too long for sockaddr_un"


def test_module_functions_use_the_process_environment(notify: NotifySocket, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", notify.address)
    monkeypatch.setattr(systemd_notify, "_default", None)
    assert systemd_notify.ready() and systemd_notify.watchdog() and systemd_notify.status("ok")
    assert systemd_notify.stopping()
    notify.wait_for(lambda messages: len(messages) == 4, WAIT_S, "four messages")
    assert [m[0] for m in notify.snapshot()] == ["READY=1", "WATCHDOG=1", "STATUS=ok", "STOPPING=1"]
    monkeypatch.setattr(systemd_notify, "_default", None)
