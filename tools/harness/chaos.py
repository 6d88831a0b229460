"""Fault injection on the real multi-process runtime: `edge-sdk run` in its own process group, a fault
at a seeded random moment, then the checks a user relies on.

A fault is an action at a moment:
- actions: SIGKILL one stage process (`kill-capture`, `kill-infer`, `kill-output`, found by their
  process names `edgesdk-<kind>`), SIGINT or SIGTERM to the parent (`sigint-parent`,
  `sigterm-parent`), SIGTERM to the whole group as `systemctl stop` sends it (`sigterm-group`);
- moments: `starting` (before the first result), `steady` (results flowing), `draining` (the file
  has been read to its end), `restarting` (right after a stage was SIGKILLed: the action hits
  while the runtime replaces it), `reconnecting` (a live source whose server is gone).

`run_with_fault` returns what happened; `problems` lists every broken promise: a hang, a frame
lost or delivered twice (files), a summary that does not match the sink, a wrong exit code, a
process or a /dev/shm entry left behind. The suite in tests/pipeline/test_chaos.py runs a short set, and
tools/bench/chaos.py runs random faults for minutes and prints the figures.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

EDGE_SDK = str(Path(sys.executable).with_name("edge-sdk"))
REPO = Path(__file__).resolve().parents[2]
STAGE_KINDS = {"kill-capture": "capture", "kill-infer": "infer", "kill-output": "output"}
SIGNALS = {"sigint-parent": signal.SIGINT, "sigterm-parent": signal.SIGTERM, "sigterm-group": signal.SIGTERM}
ACTIONS = (*STAGE_KINDS, *SIGNALS)
FILE_MOMENTS = ("starting", "steady", "draining", "restarting")
STOP_TIMEOUT_S = 4.0


@dataclass(frozen=True)
class Fault:
    action: str
    moment: str

    def __str__(self) -> str:
        return f"{self.action}@{self.moment}"


@dataclass
class Outcome:
    fault: Fault
    seed: int
    live: bool
    returncode: int | None = None
    hung: bool = False
    acted: bool = False
    """False when the run ended before the moment came (e.g. a file read to its end first)."""
    stop_signal: int | None = None
    """The signal that stopped the run, when one did (the fault's, or the stop after a live fault)."""
    rows: list[int] = field(default_factory=list)
    summary: dict[str, object] | None = None
    stderr: str = ""
    stages_seen: dict[int, str] = field(default_factory=dict)
    left_processes: list[int] = field(default_factory=list)
    left_shm: list[str] = field(default_factory=list)
    stop_seconds: float | None = None
    """Signal to exit."""
    resume_seconds: float | None = None
    """SIGKILL of a stage to the next new result."""

    def problems(self, frames: int | None) -> list[str]:
        """Broken promises; `frames` is the file's frame count (None for a live source)."""
        found = []
        if self.hung:
            return [f"{self.fault}: still running when its time was up (a hang)"]
        signalled = self.stop_signal is not None
        # A signal that lands after the run finished meets the default handler: -signal is right then.
        expected = {128 + self.stop_signal, -self.stop_signal} if self.stop_signal else {0}
        if self.returncode not in expected:
            found.append(f"{self.fault}: exit code {self.returncode}, expected one of {sorted(expected)}")
        if len(set(self.rows)) != len(self.rows):
            found.append(f"{self.fault}: frames delivered twice: {_duplicates(self.rows)}")
        if self.rows != sorted(self.rows):
            found.append(f"{self.fault}: frames out of order")
        if frames is not None and not self.live:
            wanted = list(range(frames)) if not signalled else list(range(len(self.rows)))
            if self.rows != wanted:
                missing = sorted(set(wanted) - set(self.rows))
                found.append(f"{self.fault}: {len(self.rows)} results, missing frames {missing[:10]}")
        if self.summary is None and "stopped during start-up" in self.stderr:
            if self.rows:
                found.append(f"{self.fault}: stopped during start-up, yet {len(self.rows)} results were written")
        elif self.summary is None:
            found.append(f"{self.fault}: no JSON summary on stdout")
        elif self.summary.get("frames") != len(self.rows):
            found.append(
                f"{self.fault}: summary says {self.summary.get('frames')} frames, the sink holds {len(self.rows)}"
            )
        if self.left_processes:
            found.append(f"{self.fault}: processes left running: {self.left_processes}")
        if self.left_shm:
            found.append(f"{self.fault}: left in /dev/shm: {self.left_shm}")
        if "Traceback" in self.stderr:
            found.append(f"{self.fault}: a traceback on stderr")
        return found


def file_pipeline(folder: Path, model: Path, video: Path, frames: int) -> Path:
    """A detector on a file source read `frames` times (looping a short video), two workers, JSONL."""
    return _write(
        folder,
        model,
        f"  - {{uri: '{video}', name: cam, loop: true, max_frames: {frames}}}\n",
        "  inference_workers: 2\n",
    )


def live_pipeline(folder: Path, model: Path, rtsp_url: str) -> Path:
    source = f"  - uri: '{rtsp_url}'\n    name: door\n    reconnect: {{initial_delay: 0.2, max_delay: 1.0}}\n"
    return _write(folder, model, source, "  inference_workers: 1\n")


def _write(folder: Path, model: Path, sources: str, runtime: str) -> Path:
    path = folder / "pipeline.yaml"
    path.write_text(
        f"name: chaos\nmodel: {{path: {model}}}\nsources:\n{sources}"
        "postprocess: {type: ssd, labels: [person]}\n"
        "sinks:\n  - {type: jsonl, path: out/results.jsonl}\n"
        f"runtime:\n  stats_interval_s: 0.2\n  restart_window_s: 60\n  max_restarts: 5\n"
        f"  stop_timeout_s: {STOP_TIMEOUT_S}\n{runtime}"
    )
    return path


def run_with_fault(
    pipeline: Path,
    cache: Path,
    fault: Fault,
    seed: int,
    *,
    live: bool = False,
    timeout: float = 120.0,
    lose_source: Callable[[], None] | None = None,
    stop_after: bool = False,
) -> Outcome:
    """Run the CLI on `pipeline`, inject `fault` at a moment drawn from `seed`, wait at most `timeout`.

    `stop_after` sends SIGTERM once the fault has been dealt with (for live sources, which never end)."""
    rng = random.Random(seed)
    outcome = Outcome(fault, seed, live)
    results = pipeline.parent / "out" / "results.jsonl"
    results.unlink(missing_ok=True)
    shm_before = set(os.listdir("/dev/shm"))
    process = subprocess.Popen(
        [EDGE_SDK, "run", str(pipeline), "--profile", "x86-cpu", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "EDGE_SDK_CACHE_DIR": str(cache)},
        cwd=REPO,
        start_new_session=True,
    )
    deadline = time.monotonic() + timeout
    try:
        acted_at = _inject(process, fault, rng, results, outcome, deadline, lose_source)
        outcome.acted = acted_at is not None
        if outcome.acted and fault.action in SIGNALS:
            outcome.stop_signal = SIGNALS[fault.action]
        elif stop_after and process.poll() is None:
            time.sleep(1.0)
            acted_at, outcome.stop_signal = time.monotonic(), signal.SIGTERM
            process.send_signal(signal.SIGTERM)
        stdout, outcome.stderr = process.communicate(timeout=max(1.0, deadline - time.monotonic()))
        if acted_at is not None and outcome.stop_signal is not None:
            outcome.stop_seconds = time.monotonic() - acted_at
    except subprocess.TimeoutExpired:
        outcome.hung = True
        os.killpg(process.pid, signal.SIGKILL)
        stdout, outcome.stderr = process.communicate(timeout=30)
    outcome.returncode = process.returncode
    outcome.rows = _frames(results)
    outcome.summary = _summary(stdout)
    outcome.left_processes = [pid for pid in outcome.stages_seen if _alive(pid)]
    shm_after = set(os.listdir("/dev/shm"))
    outcome.left_shm = sorted(
        name for name in shm_after - shm_before if name.startswith(f"edgesdk-{process.pid}-") or name.startswith("sem.")
    )
    return outcome


def _inject(
    process: subprocess.Popen[str],
    fault: Fault,
    rng: random.Random,
    results: Path,
    outcome: Outcome,
    deadline: float,
    lose_source: Callable[[], None] | None,
) -> float | None:
    """Wait for the moment, act; the time of the action, or None when the run ended first."""

    def watch() -> bool:
        outcome.stages_seen.update(stage_processes(process.pid))
        return process.poll() is None and time.monotonic() < deadline

    if fault.moment == "starting" and fault.action in STAGE_KINDS:  # while it imports and loads the engine
        _until(watch, lambda: _stage(outcome, fault, rng) is not None)
        time.sleep(rng.uniform(0.0, 0.5))
    elif fault.moment == "starting":
        pause_until = time.monotonic() + rng.uniform(0.0, 3.0)
        _until(watch, lambda: time.monotonic() >= pause_until or bool(_frames(results)))
    elif fault.moment in ("steady", "restarting"):
        rows = rng.randint(3, 20)
        _until(watch, lambda: len(_frames(results)) >= rows)
    elif fault.moment == "draining":
        _until(watch, lambda: _capture_finished(outcome))
    elif fault.moment == "reconnecting":
        _until(watch, lambda: len(_frames(results)) >= 3)
        if lose_source is not None:
            lose_source()
        time.sleep(rng.uniform(0.3, 2.0))
    if not watch():
        return None
    if fault.moment == "restarting":  # a first kill; the fault lands while that stage is replaced
        first = _stage(outcome, Fault(rng.choice(list(STAGE_KINDS)), "steady"), rng)
        if first is not None:
            _kill(first)
        time.sleep(rng.uniform(0.0, 0.3))
        outcome.stages_seen.update(stage_processes(process.pid))
    return _act(process, fault, outcome, results, rng)


def _act(
    process: subprocess.Popen[str], fault: Fault, outcome: Outcome, results: Path, rng: random.Random
) -> float | None:
    acted_at = time.monotonic()
    if fault.action in STAGE_KINDS:
        target = _stage(outcome, fault, rng)
        if target is None or not _kill(target):
            return None
        before = len(_frames(results))
        while process.poll() is None and time.monotonic() - acted_at < (5 if outcome.live else 60):
            if len(_frames(results)) > before:
                outcome.resume_seconds = time.monotonic() - acted_at
                break
            time.sleep(0.01)
        return acted_at
    sig = SIGNALS[fault.action]
    if fault.action == "sigterm-group":
        os.killpg(process.pid, sig)
    else:
        process.send_signal(sig)
    return acted_at


def stage_processes(parent: int) -> dict[int, str]:
    """pid -> process name of the stage processes of `parent`: its children, or its fork server's
    (pipeline/stage_start.py); the resource tracker and the fork server are not stages."""
    processes: dict[int, tuple[int, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            name = Path(f"/proc/{entry}/comm").read_text().strip()
        except OSError:
            continue
        processes[int(entry)] = (int(stat.rsplit(")", 1)[1].split()[1]), name)
    children = {pid for pid, (ppid, _name) in processes.items() if ppid == parent}
    return {
        pid: name
        for pid, (ppid, name) in processes.items()
        if (ppid == parent or ppid in children) and name.startswith("edgesdk-")
    }


def _stage(outcome: Outcome, fault: Fault, rng: random.Random) -> int | None:
    name = f"edgesdk-{STAGE_KINDS[fault.action]}"
    live = sorted(pid for pid, comm in outcome.stages_seen.items() if comm == name and _alive(pid))
    return rng.choice(live) if live else None


def _capture_finished(outcome: Outcome) -> bool:
    captures = [pid for pid, name in outcome.stages_seen.items() if name == "edgesdk-capture"]
    return bool(captures) and not any(_alive(pid) for pid in captures)


def _until(watch: Callable[[], bool], condition: Callable[[], bool]) -> None:
    while watch() and not condition():
        time.sleep(0.01)


def _kill(pid: int) -> bool:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


def _frames(path: Path) -> list[int]:
    if not path.exists():
        return []
    frames = []
    for line in path.read_text().splitlines():
        try:
            frames.append(int(json.loads(line)["frame"]))
        except (ValueError, KeyError):
            frames.append(-1)  # a torn line counts as a broken result
    return frames


def _summary(stdout: str) -> dict[str, object] | None:
    start = stdout.find("{")
    try:
        return json.loads(stdout[start:]) if start >= 0 else None
    except ValueError:
        return None


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _duplicates(rows: list[int]) -> list[int]:
    seen: set[int] = set()
    return sorted({row for row in rows if row in seen or seen.add(row)})  # type: ignore[func-returns-value]
