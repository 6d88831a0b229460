"""`edge-sdk run` as a user starts it: its own process in its own process group (so a signal can go
to the whole group, as a terminal's Ctrl-C or `systemctl stop` sends it), watched through /proc."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from edge_sdk.pipeline.shared_segments import segments_of
from tests.conftest import ASTRONAUT

EDGE_SDK = str(Path(sys.executable).with_name("edge-sdk"))


def detector_pipeline(
    folder: Path,
    model: Path,
    sinks: list[dict[str, object]],
    mode: str = "processes",
    max_frames: int | None = None,
) -> Path:
    """The person detector on a live synthetic camera (30 FPS, endless unless `max_frames`)."""
    uri = f"synthetic://?image={ASTRONAUT}&frames=30&size=320x240&fps=30&realtime=true"
    source: dict[str, object] = {"uri": uri, "name": "door", "loop": True}
    if max_frames is not None:
        source["max_frames"] = max_frames
    document = {
        "name": "door",
        "model": {"path": str(model)},
        "sources": [source],
        "postprocess": {"type": "ssd", "labels": ["person"]},
        "sinks": sinks,
        "runtime": {"mode": mode, "inference_workers": 1, "stop_timeout_s": 5},
    }
    path = folder / "pipeline.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


@dataclass
class Finished:
    returncode: int
    stdout: str
    stderr: str


@dataclass
class RunningCli:
    process: subprocess.Popen[str]
    children: set[int] = field(default_factory=set)
    """Every process seen with the CLI as its parent (stage processes, the resource tracker)."""

    @property
    def pid(self) -> int:
        return self.process.pid

    def watch(self) -> None:
        self.children.update(pid for pid, _state, ppid, _group in _processes() if ppid == self.pid)

    def wait_for(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        """Poll `condition` (watching the children meanwhile) until it holds; fail if the CLI ends first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.watch()
            if condition():
                return
            if self.process.poll() is not None:
                out, err = self.process.communicate()
                raise AssertionError(f"edge-sdk run ended before {what}: {self.process.returncode}\n{out}\n{err}")
            time.sleep(0.005)
        raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")

    def stage_started(self) -> bool:
        """A stage process has been started (it may still be importing or loading its engine):
        spawned by the CLI, or forked by multiprocessing's fork server."""
        for pid, state, ppid, group in _processes():
            if group != self.pid or pid == self.pid or state == "Z":
                continue
            if "spawn_main" in _cmdline(pid) or "multiprocessing.forkserver" in _cmdline(ppid):
                return True
        return False

    def send(self, sig: signal.Signals, to_group: bool = True) -> None:
        if to_group:
            os.killpg(self.pid, sig)
        else:
            self.process.send_signal(sig)

    def finish(self, timeout: float = 60) -> Finished:
        try:
            out, err = self.process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.pid, signal.SIGKILL)
            out, err = self.process.communicate()
            raise AssertionError(f"edge-sdk run still running {timeout:g} s after the signal\n{out}\n{err}") from None
        return Finished(self.process.returncode, out, err)

    def left_behind(self, settle: float = 10.0) -> tuple[list[int], list[str]]:
        """Processes of its group, or that it started, still alive after `settle` seconds at most,
        and the shared-memory segments it created that still exist."""
        deadline = time.monotonic() + settle
        while True:
            group = {pid for pid, state, _ppid, pgid in _processes() if pgid == self.pid and state != "Z"}
            alive = sorted(group | {pid for pid in self.children if _alive(pid)})
            if not alive or time.monotonic() > deadline:
                return alive, segments_of(self.pid)
            time.sleep(0.05)


def built_engine_cache(tmp_path_factory: pytest.TempPathFactory, model: Path) -> Path:
    """An engine cache that already holds the detector's engine, so a run starts in seconds."""
    cache = tmp_path_factory.mktemp("built-cache")
    folder = tmp_path_factory.mktemp("warm-up")
    pipeline = detector_pipeline(folder, model, [{"type": "jsonl", "path": "out/results.jsonl"}], max_frames=2)
    done = start_run(pipeline, cache).finish(timeout=180)
    assert done.returncode == 0, done.stderr
    return cache


def start_run(pipeline: Path, cache: Path, *options: str, env: dict[str, str] | None = None) -> RunningCli:
    """`edge-sdk run` on the x86-cpu profile with `cache` as its engine cache (and `env` added to its environment)."""
    process = subprocess.Popen(
        [EDGE_SDK, "run", str(pipeline), "--profile", "x86-cpu", *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "EDGE_SDK_CACHE_DIR": str(cache), "COLUMNS": "300", **(env or {})},
        start_new_session=True,
    )
    return RunningCli(process)


def result_lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines()) if path.exists() else 0


def claimed_outputs(stdout: str) -> list[Path]:
    """The files the summary's `outputs in FOLDER: a, b` line names."""
    claimed = []
    for line in stdout.splitlines():
        if line.strip().startswith("outputs in "):
            folder, names = line.strip().removeprefix("outputs in ").split(": ", 1)
            claimed += [Path(folder) / name for name in names.split(", ")]
    return claimed


def _processes() -> list[tuple[int, str, int, int]]:
    """(pid, state, parent pid, process group) of every process."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        found.append((int(entry), fields[0], int(fields[1]), int(fields[2])))
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
