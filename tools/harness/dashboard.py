"""`edge-sdk fleet dashboard` as a user runs it, for tests and benches: the CLI in a subprocess, its URL read
from what it prints, and a logged-in HTTP client.

    with DashboardProcess(broker_yaml, tmp_path) as dashboard:
        client = dashboard.login()                 # httpx.Client with the session cookie
        client.get("/api/devices").json()
        dashboard.action(client, {"action": "ping", "device": "cam-1"})
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from edge_sdk.mqtt import MqttSettings

TOKEN = "dashboard-test-token-0123456789"
URL_LINE = re.compile(r"fleet dashboard on (http://\S+)")


def write_broker_yaml(settings: MqttSettings, path: Path) -> Path:
    """An operator's broker file (`--broker`) for `settings` (TLS with a client certificate, or plain TCP)."""
    text = f"host: {settings.host}\nport: {settings.port}\nconnect_timeout_s: 5\n"
    text += (
        f"reconnect: {{min_delay_s: {settings.reconnect.min_delay_s}, max_delay_s: {settings.reconnect.max_delay_s}}}\n"
    )
    if settings.tls is not None:
        tls = settings.tls
        text += f"tls:\n  ca_file: {tls.ca_file}\n  cert_file: {tls.cert_file}\n  key_file: {tls.key_file}\n"
    path.write_text(text, encoding="utf-8")
    return path


def edge_sdk_command() -> list[str]:
    """The `edge-sdk` console script beside this interpreter, else the module."""
    script = Path(sys.executable).with_name("edge-sdk")
    return [str(script)] if script.exists() else [sys.executable, "-m", "edge_sdk.cli.entry"]


class DashboardProcess:
    """The dashboard CLI on a free port of 127.0.0.1 with a token file; stopped by SIGTERM on exit."""

    def __init__(self, broker_yaml: Path, folder: Path, *extra: str, token: str = TOKEN):
        self.folder = folder
        self.token = token
        folder.mkdir(parents=True, exist_ok=True)
        token_file = folder / "token"
        token_file.write_text(token + "\n", encoding="utf-8")
        self.args = [
            *edge_sdk_command(), "fleet", "dashboard", "--broker", str(broker_yaml), "--port", "0",
            "--token-file", str(token_file), "--state", str(folder / "rollouts.db"), *extra,
        ]  # fmt: skip
        self.process: subprocess.Popen[str] | None = None
        self.url = ""
        self.output: list[str] = []
        self.exit_code: int | None = None

    def __enter__(self) -> DashboardProcess:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen(
            self.args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=self.folder
        )
        assert self.process.stdout is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                break
            self.output.append(line)
            if match := URL_LINE.search(line):
                self.url = match.group(1)
                break
        if not self.url:
            self.__exit__()
            raise RuntimeError("the dashboard did not start:\n" + "".join(self.output))
        threading.Thread(target=self._drain, daemon=True).start()
        return self

    def _drain(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line)

    def __exit__(self, *_exc: object) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.exit_code = self.process.returncode

    def client(self) -> Any:
        import httpx

        return httpx.Client(base_url=self.url, timeout=30, follow_redirects=False)

    def login(self) -> Any:
        """A client holding a session cookie (logged in with the token file's token)."""
        client = self.client()
        response = client.post("/login", data={"token": self.token})
        if response.status_code != 303:
            raise RuntimeError(f"login failed: {response.status_code} {response.text}")
        return client

    def csrf(self, client: Any) -> str:
        page = client.get("/").text
        match = re.search(r'name="csrf-token" content="([^"]+)"', page)
        if match is None:
            raise RuntimeError("no CSRF token in the page")
        return match.group(1)

    def action(self, client: Any, body: dict[str, Any]) -> Any:
        return client.post("/api/action", json=body, headers={"x-csrf-token": self.csrf(client)})
