"""Run the shell commands of a document's ```sh blocks as a user types them, one terminal session.

    commands = sh_commands(markdown_text)           # continuation lines joined, comments left to bash
    with ShellSession(tmp_path, env) as session:
        for command in commands:
            session.run(command)                     # `cd` moves the session; `... &` runs in the background

A foreground command runs in bash from the session's folder and must exit 0; its output is kept in
`session.outputs`. A command ending in `&` is started in its own process group (stdout and stderr to a
log file), and `ShellSession.on_background` may wait for it to be ready. Closing the session sends
SIGTERM to every background process (newest first), waits, and says which did not stop.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

FENCED_SH = re.compile(r"```sh\n(.*?)```", re.S)


def sh_commands(markdown: str) -> list[str]:
    """Every command of the text's ```sh blocks, in order, with `\\` continuation lines joined."""
    commands: list[str] = []
    for block in FENCED_SH.findall(markdown):
        pending = ""
        for line in block.splitlines():
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            command = (pending + line).strip()
            pending = ""
            if command and not command.startswith("#"):
                commands.append(command)
    return commands


@dataclass
class Ran:
    command: str
    stdout: str
    stderr: str


@dataclass
class Background:
    command: str
    words: list[str]
    process: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@dataclass
class ShellSession:
    folder: Path
    env: dict[str, str]
    timeout_s: float = 90.0
    on_background: Callable[[ShellSession, Background], None] | None = None
    outputs: list[Ran] = field(default_factory=list)
    background: list[Background] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.cwd = self.folder

    def run(self, command: str) -> Ran | Background:
        words = shlex.split(command, comments=True)
        if words and words[0] == "cd":
            self.cwd = (self.cwd / words[1]).resolve()
            return Ran(command, "", "")
        if words and words[-1] == "&":
            return self._start(command, words[:-1])
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=self.timeout_s,
            check=False,
        )
        ran = Ran(command, done.stdout, done.stderr)
        self.outputs.append(ran)
        logs = "".join(f"\n--- {b.command}\n{b.output()[-3000:]}" for b in self.background)
        assert done.returncode == 0, f"`{command}` exited {done.returncode}:\n{done.stdout}{done.stderr}{logs}"
        return ran

    def _start(self, command: str, words: list[str]) -> Background:
        log = self.folder / f"background-{len(self.background)}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                words, cwd=self.cwd, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        started = Background(command, words, process, log)
        self.background.append(started)
        if self.on_background is not None:
            self.on_background(self, started)
        return started

    def output_of(self, prefix: str) -> list[str]:
        """stdout of every foreground command that starts with `prefix`, in order."""
        return [ran.stdout for ran in self.outputs if ran.command.startswith(prefix)]

    def close(self, stop_timeout_s: float = 20.0) -> list[str]:
        """Stop the background processes, newest first; the commands that had to be killed."""
        killed = []
        for started in reversed(self.background):
            process = started.process
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=stop_timeout_s)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait(timeout=5)
                    killed.append(started.command)
        return killed

    def __enter__(self) -> ShellSession:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()
