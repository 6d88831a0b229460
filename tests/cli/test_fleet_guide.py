"""The README's fleet section and docs/fleet.md, followed word for word on a real broker and a real agent.

Every ```sh command of each document runs in order in a fresh folder, as a user types it in one
terminal: `cd` moves the session, a command ending in `&` runs in the background, any other must exit 0.
The one change: `edge-sdk fleet init` gets `--port N` appended, a free port, so the broker started from
the config it wrote does not need 8883. After a background command the test waits as a user would
(for the broker's port, for the agent to show up in `fleet ls`), then checks what a user would see: the
deployment reached the device, which reports it healthy, and the rollout commands said so.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from edge_sdk.fleet.device.agent_config import load_agent_config
from edge_sdk.pipeline.shared_segments import segments_of
from tests.support.shell_session import Background, ShellSession, sh_commands
from tools.harness.broker import find_mosquitto, free_port

REPO = Path(__file__).resolve().parents[2]
README_FLEET = re.search(r"\n## Fleet control over MQTT\n(.*?)\n## ", (REPO / "README.md").read_text(), re.S)
DOCUMENTS = {
    "readme": README_FLEET.group(1) if README_FLEET else "",
    "docs-fleet": (REPO / "docs" / "fleet.md").read_text(encoding="utf-8"),
}
OPERATOR_FILE = "operator/operator.yaml"

pytestmark = [pytest.mark.broker, pytest.mark.slow]


def test_the_documents_show_the_whole_fleet_walk() -> None:
    readme, guide = (sh_commands(DOCUMENTS[name]) for name in ("readme", "docs-fleet"))
    for step in ("fleet init", "mosquitto -c", "edge-sdk agent", "fleet manifest", "fleet sign", "fleet deploy"):
        assert any(step in c for c in readme), f"the README's fleet block shows {step}"
    for step in ("fleet ls", "fleet status", "fleet resume", "fleet rollback", "--first-wave", "--version 2"):
        assert any(step in c for c in guide), f"docs/fleet.md shows {step}"
    assert "docs/fleet.md" in DOCUMENTS["readme"]
    assert "ROLLOUT" not in " ".join(readme + guide), "every command is runnable as written"


@pytest.mark.parametrize("document", list(DOCUMENTS))
def test_the_fleet_commands_of_the_document_work_as_written_on_a_real_broker(document: str, tmp_path: Path) -> None:
    mosquitto = find_mosquitto()
    if mosquitto is None:
        pytest.skip("needs the mosquitto binary (apt-get install mosquitto)")
    port = free_port()
    bin_dirs = [str(Path(sys.executable).parent), str(Path(mosquitto).parent)]
    env = {**os.environ, "PATH": os.pathsep.join([*bin_dirs, os.environ.get("PATH", "")])}
    env.pop("EDGE_SDK_FLEET_BROKER", None)
    started = time.monotonic()
    agents: list[int] = []

    def ready(session: ShellSession, job: Background) -> None:
        if Path(job.words[0]).name == "mosquitto":
            wait_for(lambda: port_open(port), 10, f"the broker to listen on {port}", job)
        elif job.words[:2] == ["edge-sdk", "agent"]:
            agents.append(job.process.pid)
            config = load_agent_config(session.cwd / job.words[job.words.index("--config") + 1])
            wait_for(lambda: device_online(session, config.device_id), 30, f"{config.device_id} in fleet ls", job)

    with ShellSession(tmp_path, env, on_background=ready) as session:
        timings = []
        for command in sh_commands(DOCUMENTS[document]):
            if command.startswith("edge-sdk fleet init"):
                # the only change to what the document says (before the line's comment, which bash drops)
                command = command.split(" #")[0].rstrip() + f" --port {port}"
            began = time.monotonic()
            session.run(command)
            timings.append(f"{time.monotonic() - began:5.1f} s  {command[:90]}")
        print("\n".join(timings))
        # then the device runs a deployed version and reports itself healthy
        session.run(f"edge-sdk fleet ls --broker {OPERATOR_FILE} --format json")
        listed = json.loads(session.outputs[-1].stdout)
        device = next(d for d in listed if d["device"] == "cam-001")
        assert device["online"] and device["health"] == "ok" and device["active_version"] == 1, device
        deploys = session.output_of("edge-sdk fleet deploy")
        assert deploys and all("cam-001: active" in out and ": completed" in out for out in deploys), deploys
        for resumed in session.output_of("edge-sdk fleet resume"):
            assert ": completed" in resumed and "1 active" in resumed, resumed
        for rolled_back in session.output_of("edge-sdk fleet rollback"):
            assert "1 rolled_back" in rolled_back, rolled_back
        killed = session.close()
    assert not killed, f"did not stop on SIGTERM: {killed}"
    for pid in agents:
        assert not segments_of(pid), f"the agent left shared memory: {segments_of(pid)}"
        left = group_left(pid)
        assert not left, f"processes of the agent outlived it: {left}"
    assert time.monotonic() - started < 180, "the walk-through stays quick (about 45 s on an idle 2-core box)"


def port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
    except OSError:
        return False
    return True


def device_online(session: ShellSession, device: str) -> bool:
    done = subprocess.run(
        ["edge-sdk", "fleet", "ls", "--broker", OPERATOR_FILE, "--format", "json", "--wait", "0.5"],
        cwd=session.cwd,
        env=session.env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return done.returncode == 0 and any(d["device"] == device and d["online"] for d in json.loads(done.stdout or "[]"))


def wait_for(check: object, timeout_s: float, what: str, job: Background) -> None:
    assert callable(check)
    deadline = time.monotonic() + timeout_s
    while not check():
        if job.process.poll() is not None:
            pytest.fail(f"`{job.command}` exited {job.process.returncode} while waiting for {what}:\n{job.output()}")
        if time.monotonic() > deadline:
            pytest.fail(f"waited {timeout_s} s for {what}:\n{job.output()}")
        time.sleep(0.2)


def group_left(pgid: int, settle_s: float = 10.0) -> list[str]:
    """Command lines of the processes of group `pgid` still alive after `settle_s` at most."""
    deadline = time.monotonic() + settle_s
    while True:
        left = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
                if int(fields[2]) == pgid and fields[0] != "Z":
                    left.append((stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
            except OSError:
                continue
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)
