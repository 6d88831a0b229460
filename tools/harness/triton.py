"""A real Triton Inference Server for tests and benches: `start_triton(model, name)` runs
tools/harness/triton_server.py under `.venv-triton` (made by `make .venv-triton/.ready`) on free ports
and stops it, with every process it started, on exit.

    with start_triton(model_path, "detector", folder) as server:
        server.grpc_url  # "grpc://127.0.0.1:PORT"
        server.kill()    # a server that dies mid-run
"""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
TRITON_VENV = REPO_ROOT / ".venv-triton"
TRITON_PYTHON = TRITON_VENV / "bin" / "python"
SERVER_SCRIPT = Path(__file__).with_name("triton_server.py")
READY_TIMEOUT_S = 30.0
START_TRIES = 3


def triton_problem() -> str | None:
    """Why a Triton server cannot be started here, or None."""
    if not (TRITON_VENV / ".ready").exists():
        return "needs .venv-triton with nvidia-pytriton (make .venv-triton/.ready)"
    return None


@dataclass
class TritonServer:
    process: subprocess.Popen[str]
    grpc_port: int
    http_port: int
    log_file: Path
    home: Path
    killed: bool = field(default=False)

    @property
    def grpc_url(self) -> str:
        return f"grpc://127.0.0.1:{self.grpc_port}"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def kill(self) -> None:
        """SIGKILL the server and everything it started (tritonserver, the Python backend's stubs)."""
        _signal_group(self.process, signal.SIGKILL)
        self.process.wait(10)
        self.killed = True

    def pause(self, paused: bool = True) -> None:
        """SIGSTOP (or SIGCONT) the server and everything it started: a server that hangs."""
        _signal_group(self.process, signal.SIGSTOP if paused else signal.SIGCONT)

    def stop(self) -> None:
        self.pause(False)  # a stopped process would ignore SIGTERM until continued
        if self.process.poll() is None:
            _signal_group(self.process, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(15)
        _signal_group(self.process, signal.SIGKILL)  # whatever is left of the group (the stubs, tritonserver)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(5)
        # what a killed server leaves: its workspace, and the Python backend's shared memory regions
        shutil.rmtree(self.home, ignore_errors=True)
        for region in Path("/dev/shm").glob(f"pytrtion{self.process.pid}-*"):
            region.unlink(missing_ok=True)


@contextlib.contextmanager
def start_triton(
    model: Path,
    name: str,
    folder: Path,
    max_batch: int = 8,
    queue_delay_us: int = 2000,
    threads: int = 0,
    garbage_when: Path | None = None,
    max_queue_size: int = 0,
    queue_timeout_us: int = 0,
) -> Iterator[TritonServer]:
    """Triton serving `model` (ONNX, through ONNX Runtime) as `name` with dynamic batching, ready; while
    the file `garbage_when` holds "names" or "shapes", its answers are wrong in that way."""
    problem = triton_problem()
    if problem:
        raise RuntimeError(problem)
    folder.mkdir(parents=True, exist_ok=True)
    errors = []
    for attempt in range(START_TRIES):  # a free port taken by someone else in between: try new ones
        server = _launch(model, name, folder, attempt, [
            "--max-batch", str(max_batch), "--queue-delay-us", str(queue_delay_us), "--threads", str(threads),
            "--max-queue-size", str(max_queue_size), "--queue-timeout-us", str(queue_timeout_us),
            *(["--garbage-when", str(garbage_when)] if garbage_when else []),
        ])  # fmt: skip
        try:
            _wait_ready(server)
        except RuntimeError as exc:
            server.stop()
            errors.append(str(exc))
            continue
        try:
            yield server
        finally:
            server.stop()
        return
    raise RuntimeError(f"Triton did not start in {START_TRIES} tries: " + " | ".join(errors))


def _launch(model: Path, name: str, folder: Path, attempt: int, options: list[str]) -> TritonServer:
    grpc_port, http_port, metrics_port = _free_ports(3)
    log_file = folder / f"triton-{attempt}.log"
    # pytriton keeps its workspace (unix sockets among them) here: a short path, as a socket path has ~100 bytes
    home = Path(f"/tmp/pyt-{os.getpid()}-{attempt}-{time.monotonic_ns() % 100000}")
    command = [
        str(TRITON_PYTHON), str(SERVER_SCRIPT), str(model), "--name", name,
        "--grpc-port", str(grpc_port), "--http-port", str(http_port), "--metrics-port", str(metrics_port),
        "--log-file", str(log_file), *options,
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["PYTRITON_HOME"] = str(home)
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,  # its own process group: stop() and kill() reach tritonserver and the stubs
    )
    return TritonServer(process, grpc_port, http_port, log_file, home)


def _wait_ready(server: TritonServer) -> None:
    """Until the script prints its ready line; RuntimeError with its last output otherwise. A thread
    reads its output to the end, so a full pipe never blocks the server."""
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert server.process.stdout is not None
        for line in server.process.stdout:
            lines.put(line.rstrip())
        lines.put(None)

    threading.Thread(target=read, name="triton-output", daemon=True).start()
    deadline = time.monotonic() + READY_TIMEOUT_S
    seen: list[str] = []
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            break
        if line is None:
            break
        seen.append(line)
        if line.startswith("{"):
            return
    tail = " / ".join(seen[-5:]) or "no output"
    raise RuntimeError(f"exit code {server.process.poll()} or not ready in {READY_TIMEOUT_S:.0f} s: {tail}")


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _signal_group(process: subprocess.Popen[str], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signum)
