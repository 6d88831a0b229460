"""The test bed of tools/bench/offload.py: a private Mosquitto, one offload worker pinned to core 1,
the throttling proxy on the edge's link (counting the bytes it carries), and one `edge-sdk run` of
the demo detector pinned to core 0 per cell.

Everything it starts is its own: the worker and each run are started in a session of their own and
ended by process group (SIGINT, then SIGKILL), the broker is stopped, and the shared-memory
segments of each run (`/dev/shm/edgesdk-<its pid>-...`) are removed if the run left any.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from edge_sdk.pipeline.shared_segments import SHM_DIR, segments_of
from tools.harness.broker import MosquittoBroker
from tools.harness.throttle_proxy import LinkShape, ThrottlingProxy

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "ssdlite_mobilenet_v2_person.onnx"
ASSET = REPO / "tools" / "assets" / "astronaut.jpg"
EDGE_SDK = str(Path(sys.executable).parent / "edge-sdk")
DEVICE = "cam-1"
WORKER_READY_S = 600.0
STOP_WAIT_S = 20.0


# --- the link: the harness's proxy, its byte counters sampled ---------------------------------------


class CountingProxy(ThrottlingProxy):
    """ThrottlingProxy with a sampler of its byte counters over time, so a window of frames gets its bytes."""

    def __init__(self, upstream: tuple[str, int], shape: LinkShape):
        super().__init__(upstream, shape)
        self.samples: list[tuple[float, int, int]] = []
        self._stop = threading.Event()
        threading.Thread(target=self._sample, name="offload-bench-bytes", daemon=True).start()

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            self.samples.append((time.time(), self.bytes_up, self.bytes_down))

    def bytes_between(self, start: float, end: float) -> tuple[float, float]:
        """Bytes (up, down) carried between two wall-clock times (linear between 50 ms samples)."""
        up0, down0 = self._at(start)
        up1, down1 = self._at(end)
        return up1 - up0, down1 - down0

    def _at(self, when: float) -> tuple[float, float]:
        samples = list(self.samples)
        if not samples:
            return 0.0, 0.0
        if when <= samples[0][0]:
            return float(samples[0][1]), float(samples[0][2])
        for (t0, u0, d0), (t1, u1, d1) in itertools.pairwise(samples):
            if t0 <= when <= t1:
                share = (when - t0) / (t1 - t0) if t1 > t0 else 0.0
                return u0 + share * (u1 - u0), d0 + share * (d1 - d0)
        return float(samples[-1][1]), float(samples[-1][2])

    def close(self) -> None:
        self._stop.set()
        super().close()


# --- processes ---------------------------------------------------------------------------------------


def end_group(process: subprocess.Popen[Any], first: int = signal.SIGINT, wait_s: float = STOP_WAIT_S) -> None:
    """Stop a process started with start_new_session=True and everything in its group."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, first)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=wait_s)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # stages or a fork server that outlived their parent
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=5)


def remove_segments(pid: int) -> list[str]:
    names = segments_of(pid)
    for name in names:
        with contextlib.suppress(FileNotFoundError):
            (SHM_DIR / name).unlink()
    return names


class LineLog:
    """A process's output lines, each with the wall-clock time it was read, also written to a file."""

    def __init__(self, stream: Any, path: Path):
        self.lines: list[tuple[float, str]] = []
        self._path = path
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True, name="offload-bench-log")
        self._thread.start()

    def _read(self, stream: Any) -> None:
        with self._path.open("a", encoding="utf-8") as out:
            for line in stream:
                self.lines.append((time.time(), line.rstrip("\n")))
                out.write(line)
                out.flush()

    def wait_for(self, text: str, process: subprocess.Popen[Any], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not any(text in line for _t, line in self.lines):
            if process.poll() is not None:
                said = " | ".join(line for _t, line in self.lines[-6:])
                raise RuntimeError(f"exited with {process.returncode} before {text!r} ({said}); see {self._path}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"no {text!r} within {timeout_s:.0f} s; see {self._path}")
            time.sleep(0.1)

    def join(self, timeout_s: float = 5.0) -> None:
        self._thread.join(timeout_s)


# --- pipeline files ------------------------------------------------------------------------------------


MODELS = ("detector", "resnet18", "resnet50")
"""The demo detector (SSDLite MobileNetV2, ~0.8 GFLOP), a ResNet-18-shaped classifier (1.8 GFLOP at 224 px) and
a ResNet-50-shaped one at RESNET50_SIZE px (16 GFLOP, about a YOLOv8s's compute at 480 px: a model a 2-core edge
runs slower than a 15 FPS camera), random weights (tools/harness/onnx_models.py), all fed the same camera."""
RESNET50_SIZE = 448
CLASSIFIER_SIZES = {"resnet18": 224, "resnet50": RESNET50_SIZE}


def model_file(model: str, folder: Path) -> Path:
    if model == "detector":
        return MODEL
    from tools.harness.onnx_models import resnet18_like, resnet50_like

    path = folder / f"{model}.onnx"
    if path.exists():
        return path
    if model == "resnet50":
        return resnet50_like(path, batch=1, size=RESNET50_SIZE)
    return resnet18_like(path, batch=1)


def demo_pipeline(
    fps: float,
    results: Path | None,
    offload: dict[str, Any] | None,
    model: str = "detector",
    folder: Path = REPO,
    threads: int = 1,
) -> dict[str, Any]:
    """pipelines/demo.yaml with absolute paths, one inference worker of one thread, and the demo video's
    frames from the synthetic source it was rendered by (the same photo, path and 300-frame cycle, 640x480),
    paced at `fps` like a live camera (a file source is read as fast as it decodes: no option paces it).
    `model` resnet18 or resnet50 swaps in a classifier (ImageNet preprocessing, top-5) and keeps the rest."""
    pipeline: dict[str, Any] = {
        "name": "demo",
        "model": {"path": str(model_file(model, folder))},
        "preprocess": {"resize": [300, 300], "color": "rgb", "layout": "nhwc", "dtype": "uint8"},
        "sources": [
            {
                "uri": "synthetic://",
                "name": "demo",
                "options": {"image": str(ASSET), "frames": 300, "size": "640x480", "fps": fps, "realtime": True},
                "loop": True,
                "buffer": "latest",
            }
        ],
        "postprocess": {"type": "ssd", "score_threshold": 0.5, "labels": ["person"]},
        "runtime": {"mode": "processes", "inference_workers": 1, "inference_threads": threads},
        "sinks": [{"type": "jsonl", "path": str(results)}] if results is not None else [],
    }
    if model in CLASSIFIER_SIZES:
        side = CLASSIFIER_SIZES[model]
        pipeline["preprocess"] = {
            "resize": [side, side],
            "color": "rgb",
            "layout": "nchw",
            "dtype": "float32",
            "scale": 1 / 255,
            "mean": [0.485, 0.456, 0.406],
            "std": [0.229, 0.224, 0.225],
        }
        pipeline["postprocess"] = {"type": "classification", "output": "logits", "top_k": 5, "softmax": True}
    if offload is not None:
        pipeline["offload"] = offload
    return pipeline


def write_yaml(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@dataclass(frozen=True)
class Placement:
    """Where the edge and the worker run: CPU cores (taskset lists), threads, and device profiles. The
    default is this 2-core machine's split; on the NVIDIA host the edge gets 2 cores and the x86-cpu
    profile, the worker the GPU (x86-nvidia)."""

    edge_cores: str = "0"
    edge_threads: int = 1
    edge_profile: str | None = None
    worker_cores: str = "1"
    worker_threads: int | None = 1
    worker_profile: str | None = None


# --- the bed -----------------------------------------------------------------------------------------------


@dataclass
class Bed:
    folder: Path
    broker: MosquittoBroker
    proxy: CountingProxy
    worker: subprocess.Popen[str]
    worker_log: LineLog
    edge_broker_file: Path
    model: str
    placement: Placement
    runs: list[int] = field(default_factory=list)
    """pids of the edge runs started, for their shared-memory segments."""


@contextlib.contextmanager
def open_bed(
    folder: Path,
    rtt_ms: float,
    fps: float,
    log: Callable[[str], None],
    model: str = "detector",
    placement: Placement = Placement(),
) -> Iterator[Bed]:
    folder.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        broker = MosquittoBroker(folder / "broker")
        broker.start()
        stack.callback(broker.stop)
        worker_broker = write_yaml(folder / "worker-broker.yaml", {"host": broker.host, "port": broker.port})
        served = write_yaml(folder / "served.yaml", demo_pipeline(fps, None, None, model, folder))
        command = ["taskset", "-c", placement.worker_cores, EDGE_SDK, "offload", "worker"]
        command += ["--broker", str(worker_broker), "--pipeline", str(served), "--id", "w1"]
        if placement.worker_threads is not None:
            command += ["--threads", str(placement.worker_threads)]
        if placement.worker_profile is not None:
            command += ["--profile", placement.worker_profile]
        log(f"worker: {' '.join(command)}")
        worker = subprocess.Popen(
            command, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
        stack.callback(end_group, worker, signal.SIGTERM)
        worker_log = LineLog(worker.stdout, folder / "worker.log")
        worker_log.wait_for("ready on", worker, WORKER_READY_S)
        proxy = CountingProxy((broker.host, broker.port), LinkShape(100e6, rtt_ms / 2000))
        stack.callback(proxy.close)
        edge_broker = write_yaml(folder / "edge-broker.yaml", {"host": "127.0.0.1", "port": proxy.port})
        bed = Bed(folder, broker, proxy, worker, worker_log, edge_broker, model, placement)
        try:
            yield bed
        finally:
            for pid in bed.runs:
                if left := remove_segments(pid):
                    log(f"removed {len(left)} shared-memory segment(s) run {pid} left: {', '.join(left)}")


# --- one run of the edge -------------------------------------------------------------------------------------


@dataclass
class EdgeRun:
    rows: list[dict[str, Any]]
    """The JSONL's final results (updates left out), in file order, each with `_seen`: when the bench read it."""
    window: tuple[int, int]
    """Frame indices [first, end) measured."""
    window_started: float
    """Wall-clock time the window began (first result + settle)."""
    summary: dict[str, Any] | None
    log: list[tuple[float, str]]
    returncode: int | None
    command: list[str]
    launched: float
    """Wall-clock time the run was started."""
    updates: int = 0


def run_edge(
    bed: Bed,
    name: str,
    fps: float,
    offload: dict[str, Any],
    frames: int,
    settle_s: float,
    *,
    on_window: Callable[[float], None] | None = None,
    start_timeout_s: float = 120.0,
) -> EdgeRun:
    """`taskset -c 0 edge-sdk run --json` of the demo with this `offload:` section until `frames`
    consecutive frames, from the first one the camera made `settle_s` after the first result, each
    have their final result (or their deadline and a margin have passed); then SIGINT."""
    results = bed.folder / f"{name}.jsonl"
    results.unlink(missing_ok=True)
    pipeline = write_yaml(
        bed.folder / f"{name}.yaml",
        demo_pipeline(fps, results, offload, bed.model, bed.folder, bed.placement.edge_threads),
    )
    where = bed.placement
    command = ["taskset", "-c", where.edge_cores, EDGE_SDK, "run", "--json", str(pipeline)]
    if where.edge_profile is not None:
        command += ["--profile", where.edge_profile]
    launched = time.time()
    process = subprocess.Popen(
        command,
        cwd=bed.folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    bed.runs.append(process.pid)
    stderr = LineLog(process.stderr, bed.folder / f"{name}.log")
    stdout: list[str] = []
    out_thread = threading.Thread(target=lambda: stdout.extend(process.stdout or []), daemon=True)
    out_thread.start()
    rows: list[dict[str, Any]] = []
    updates = 0
    offset = 0
    pending = b""
    first_seen: float | None = None
    window_start: float | None = None
    window: tuple[int, int] | None = None
    told = False
    begun = time.monotonic()
    try:
        while True:
            if results.exists():
                with results.open("rb") as handle:
                    handle.seek(offset)
                    data = handle.read()
                offset += len(data)
                pending += data
                *complete, pending = pending.split(b"\n")
                now = time.time()
                for line in complete:
                    row = json.loads(line)
                    if row.get("update"):
                        updates += 1
                        continue
                    row["_seen"] = now
                    rows.append(row)
            if first_seen is None and rows:
                first_seen = rows[0]["_seen"]
                window_start = first_seen + settle_s
            if window_start is not None and not told and time.time() >= window_start:
                told = True
                if on_window is not None:
                    on_window(window_start)
            if window is None and window_start is not None:
                later = [r["frame"] for r in rows if r["timestamp"] >= window_start]
                if later:
                    window = (min(later), min(later) + frames)
            if window is not None:
                have = {r["frame"] for r in rows if window[0] <= r["frame"] < window[1]}
                overdue = time.time() > window_start + frames / fps + offload.get("deadline_ms", 500) / 1000 + 5  # type: ignore[operator]
                if len(have) == frames or overdue:
                    break
            if process.poll() is not None:
                stderr.join(2.0)
                said = " | ".join(line for _t, line in stderr.lines[-6:])
                raise RuntimeError(
                    f"edge-sdk run ended with {process.returncode} ({said}); see {bed.folder / name}.log"
                )
            if first_seen is None and time.monotonic() - begun > start_timeout_s:
                raise RuntimeError(f"no result within {start_timeout_s:.0f} s; see {bed.folder / name}.log")
            time.sleep(0.05)
    finally:
        end_group(process, signal.SIGINT)
        out_thread.join(5)
        stderr.join()
        if left := remove_segments(process.pid):
            stderr.lines.append((time.time(), f"bench: removed shared-memory segments left behind: {left}"))
    summary = None
    with contextlib.suppress(ValueError):
        summary = json.loads("".join(stdout)) if stdout else None
    assert window is not None and window_start is not None
    return EdgeRun(rows, window, window_start, summary, stderr.lines, process.returncode, command, launched, updates)
