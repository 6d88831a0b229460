"""The agent under a systemd-like supervisor: `edge-sdk agent` with $NOTIFY_SOCKET and $WATCHDOG_USEC set
tells READY=1, keeps sending WATCHDOG=1 while its inbox works, and STOPPING=1 on SIGTERM before it exits."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from edge_sdk.core.systemd_notify import SystemdNotifier
from edge_sdk.fleet.device import agent_service
from edge_sdk.fleet.device.agent import Agent
from edge_sdk.fleet.device.agent_config import AgentConfig
from edge_sdk.fleet.device.agent_inbox import AgentInbox
from edge_sdk.fleet.device.agent_service import run_agent
from edge_sdk.mqtt import MqttSettings
from tests.fleet.conftest import Keys
from tests.support.clients import RecordingClient
from tests.support.notify_socket import NotifySocket
from tools.harness.broker import FleetBroker
from tools.harness.deployments import DEVICE_ID, PROFILE

EDGE_SDK = str(Path(sys.executable).with_name("edge-sdk"))
WAIT_S = 60.0
"""Generous: the machine may be loaded; every assertion counts messages, none times them closely."""


def test_inbox_alive_while_idle_or_busy_briefly_not_when_stuck_or_dead() -> None:
    inbox = AgentInbox(RecordingClient(MqttSettings()), name="test-inbox", max_chunk_bytes=1 << 20)
    assert not inbox.alive(60), "not started"
    inbox.start()
    assert inbox.alive(60)
    release, running = threading.Event(), threading.Event()
    inbox.submit("stuck", lambda: (running.set(), release.wait(WAIT_S)))
    assert running.wait(WAIT_S)
    assert inbox.alive(60), "busy for less than the limit"
    time.sleep(0.3)
    assert not inbox.alive(0.2), "one job for longer than the limit: stuck"
    release.set()
    deadline = time.monotonic() + WAIT_S
    while not inbox.alive(0.2) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert inbox.alive(0.2), "alive again once the job is done"
    inbox.stop(WAIT_S)
    assert not inbox.alive(60), "a stopped worker is not alive"


def test_run_agent_stops_watchdog_pings_while_its_inbox_is_stuck(
    tmp_path: Path, operator_keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given run_agent with a 1 s watchdog (pings every 0.5 s), its agent on a recording client
    made: list[Agent] = []

    def make_agent(config: AgentConfig) -> Agent:
        made.append(Agent(config, client=RecordingClient))
        return made[-1]

    monkeypatch.setattr(agent_service, "Agent", make_agent)
    config = AgentConfig(
        device_id=DEVICE_ID,
        broker=MqttSettings(client_id=DEVICE_ID),
        store_dir=tmp_path / "store",
        trusted_keys_dir=operator_keys.folder,
        profile=PROFILE,
    )
    stop = threading.Event()
    with NotifySocket.bind(tmp_path / "notify.sock") as notify:
        notifier = SystemdNotifier(notify.address, watchdog_seconds=1.0)
        runner = threading.Thread(target=run_agent, args=(config, stop, notifier, 2.0), daemon=True)
        runner.start()
        try:
            notify.wait_for(lambda m: len(m) >= 3 and m[0][0] == "READY=1", WAIT_S, "READY=1, then pings")

            # when one inbox job hangs
            release = threading.Event()
            made[0].inbox.submit("hang", lambda: release.wait(WAIT_S))

            # then the pings stop once it has run for longer than hung_after_s, and come back when it ends
            def quiet_for(seconds: float) -> bool:
                before = notify.count("WATCHDOG=1")
                time.sleep(seconds)
                return notify.count("WATCHDOG=1") == before

            deadline = time.monotonic() + WAIT_S
            while not quiet_for(1.5):
                assert time.monotonic() < deadline, "watchdog pings went on while the inbox was stuck"
            release.set()
            stalled = notify.count("WATCHDOG=1")
            notify.wait_for(lambda m: notify.count("WATCHDOG=1") >= stalled + 2, WAIT_S, "pings again")
        finally:
            stop.set()
            runner.join(WAIT_S)
        assert not runner.is_alive()
        notify.wait_for(lambda m: bool(m) and m[-1][0] == "STOPPING=1", WAIT_S, "STOPPING=1 last")


@pytest.mark.slow
def test_edge_sdk_agent_process_notifies_ready_watchdog_and_stopping(
    fleet: FleetBroker, tmp_path: Path, operator_keys: Keys
) -> None:
    # given `edge-sdk agent --config agent.yaml` started as systemd starts a Type=notify unit with WatchdogSec=2
    config = AgentConfig(
        device_id=DEVICE_ID,
        broker=fleet.settings(DEVICE_ID, client_id=DEVICE_ID),
        store_dir=tmp_path / "store",
        trusted_keys_dir=operator_keys.folder,
        profile=PROFILE,
        engine_cache_dir=tmp_path / "engines",
    )
    path = tmp_path / "agent.yaml"
    data: dict[str, Any] = json.loads(config.model_dump_json())
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with NotifySocket.bind(tmp_path / "notify.sock") as notify:
        env = {**os.environ, "NOTIFY_SOCKET": notify.address, "WATCHDOG_USEC": "2000000"}
        process = subprocess.Popen(
            [EDGE_SDK, "agent", "--config", str(path)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            # then it says READY=1 once, and keeps pinging the watchdog
            notify.wait_for(lambda m: notify.count("READY=1") == 1, WAIT_S, "READY=1")
            assert notify.snapshot()[0][0] == "READY=1", "READY=1 comes first"
            notify.wait_for(lambda m: notify.count("WATCHDOG=1") >= 4, WAIT_S, "four WATCHDOG=1")

            # when systemd stops it
            process.send_signal(signal.SIGTERM)
            out, err = process.communicate(timeout=WAIT_S)
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
        # then it says STOPPING=1 and exits cleanly within the stop timeout
        assert process.returncode == 0, f"{out}\n{err}"
        notify.wait_for(lambda m: notify.count("STOPPING=1") == 1, WAIT_S, "STOPPING=1")
        lines = [message[0] for message in notify.snapshot()]
        assert lines.index("STOPPING=1") == len(lines) - 1, f"nothing after STOPPING=1: {lines}"
        assert "stopped" in out
