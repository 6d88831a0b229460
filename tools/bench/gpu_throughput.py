"""GPU throughput of the SDK's engines on an NVIDIA GPU, side by side with the CPU and PyTorch, in one run.

Usage: python tools/bench/gpu_throughput.py [--seconds 2] [--batches 1,8,32,128,256] [--total-seconds 400]
       [--sections torch,cnn,split,detector,limits,cpu] [--json PATH]

Models: the ResNet-18-sized CNN of tools/harness/onnx_models.py (random weights, float32 [N, 3, 224, 224]) and
the demo detector as pipelines/demo.yaml builds it (preprocessing folded, raw 640x480 BGR frames in).
Engines come from `prepare_engine` (throw-away cache) with the shipped x86-cpu and x86-nvidia profiles;
the variants of one engine differ only in runtime options (io_binding, cuda_graph), which do not
change the engine. Per model, variant and batch: items/s, p50 and p99 latency of one call, measured
for --seconds after warm-up. Rows:

- CPU EP, x86-cpu, all cores; CUDA EP fp32 with numpy feeds through plain session.run (io_binding
  off); through I/O binding (the default) with numpy, page-locked host and device-resident
  (OrtValue) inputs; CUDA graphs (cuda_graph: true) with numpy and device inputs; the x86-nvidia
  fp16 engine (the graph converted to float16), also with the CUDA provider's prefer_nhwc and CUDA
  graphs; the CNN with its normalisation folded in (uint8 NHWC frames in: 4x fewer bytes to copy).
- PyTorch's own ResNet-18 fp32 (channels_last) and fp16 (channels_last, and NCHW as a plain
  `model.half()` runs), cudnn.benchmark, in a subprocess so its CUDA libraries cannot clash with
  ONNX Runtime's.
- The detector cut after its box head (the pipeline's `postprocess: {type: ssd, decode: sdk}`, no NMS
  Loop in the engine): CPU, CUDA with numpy, page-locked and device inputs, CUDA graphs, and engine +
  host decode, in one thread or pipelined (the decode of one batch on a second thread while the
  engine runs the next, as the pipeline's output stage does).
- What limits the GPU: the detector's graph as ONNX Runtime runs it on CUDA (nodes per provider,
  Memcpy nodes) and the time per op type and provider from ONNX Runtime's profiler.

Every section is independent (an error prints one line and the run goes on); a batch that runs out
of memory prints one line and the larger batches of that variant are skipped; a new measurement
starts only while the --total-seconds guard allows, and a watchdog ends the process 40 s after it.
The table prints as it goes; every figure goes to $OUT/gpu_throughput.json (when OUT is set) and to
--json, rewritten after each row. Without a usable CUDA EP (or PyTorch with CUDA) those sections
print one line saying why and are skipped.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import gc
import importlib.util
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache, partial
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

DETECTOR = REPO / "models" / "ssdlite_mobilenet_v2_person.onnx"
ASTRONAUT = REPO / "tools" / "assets" / "astronaut.jpg"
FRAME_SIZE = (640, 480)
CNN_SIZE = 224
IMAGENET: dict[str, Any] = {"scale": 1 / 255, "mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)}
CNN_TARGET = 20_000.0
FP16_TARGET = 0.9
DETECTOR_TARGET = 10.0
MIN_ITERATIONS = 3
MAX_ITERATIONS = 100_000
WATCHDOG_GRACE = 40.0
PROFILE_WARMUP = 3
PROFILE_RUNS = 5
SECTIONS = ("torch", "cnn", "split", "detector", "limits", "cpu")
CPU_MAX_BATCH = 32
"""CPU rows stop here: CPU throughput is flat past small batches, and a batch of 256 takes seconds a call."""


# --- Reporting -------------------------------------------------------------------------------------------------------


@dataclass
class Timing:
    batch: int
    iterations: int
    items_per_s: float
    p50_ms: float
    p99_ms: float
    mean_ms: float


@dataclass
class Report:
    json_paths: list[Path]
    rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    limits: dict[str, Any] = field(default_factory=dict)
    targets: list[dict[str, Any]] = field(default_factory=list)
    _header_for: str = ""

    def say(self, text: str) -> None:
        print(text, flush=True)

    def note(self, text: str) -> None:
        self.notes.append(text)
        self.say(f"- {text}")
        self.save()

    def section(self, title: str) -> None:
        self.say(f"\n## {title}\n")
        self._header_for = ""

    def row(
        self, model: str, variant: str, timing: Timing | None, error: str = "", check: str = "", **extra: Any
    ) -> None:
        if self._header_for != model:
            self.say("| model | variant | batch | items/s | p50 ms | p99 ms | iters | check / note |")
            self.say("|---|---|---:|---:|---:|---:|---:|---|")
            self._header_for = model
        record: dict[str, Any] = {"model": model, "variant": variant, **extra}
        if timing is not None:
            record |= {k: round(v, 3) if isinstance(v, float) else v for k, v in timing.__dict__.items()}
            cells = [
                str(timing.batch),
                f"{timing.items_per_s:,.1f}",
                f"{timing.p50_ms:.2f}",
                f"{timing.p99_ms:.2f}",
                str(timing.iterations),
            ]
        else:
            cells = [str(extra.get("batch", "-")), "-", "-", "-", "-"]
        if error:
            record["error"] = error
        if check:
            record["check"] = check
        self.rows.append(record)
        self.say(f"| {model} | {variant} | {' | '.join(cells)} | {error or check} |")
        self.save()

    def save(self) -> None:
        data = {
            "meta": self.meta,
            "rows": self.rows,
            "notes": self.notes,
            "limits": self.limits,
            "targets": self.targets,
        }
        for path in self.json_paths:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                partial = path.with_suffix(".json.partial")
                partial.write_text(json.dumps(data, indent=1, default=str))
                partial.replace(path)
            except OSError as exc:
                print(f"cannot write {path}: {exc}", file=sys.stderr, flush=True)

    def best(self, model: str, variants: Callable[[str], bool]) -> dict[str, Any] | None:
        rows = [r for r in self.rows if r["model"] == model and variants(r["variant"]) and "items_per_s" in r]
        return max(rows, key=lambda r: r["items_per_s"], default=None)


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__


def out_of_memory(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "out of memory" in text or "outofmemory" in type(exc).__name__.lower() or "failed to allocate" in text


class Budget:
    """The --total-seconds guard: a measurement starts only while enough time is left."""

    def __init__(self, total: float, seconds: float, report: Report):
        self.started = time.monotonic()
        self.total = total
        self.reserve = 2 * seconds + 3
        self.report = report
        self.skipped: list[str] = []

    def left(self) -> float:
        return self.total - (time.monotonic() - self.started)

    def allows(self, what: str) -> bool:
        if self.left() > self.reserve:
            return True
        self.skipped.append(what)
        if len(self.skipped) == 1:
            self.report.say(
                f"(time guard: {self.left():.0f} s left of {self.total:.0f}; skipping {what} and what follows)"
            )
        return False


def start_watchdog(report: Report, seconds: float) -> None:
    def fire() -> None:
        report.notes.append(f"watchdog: the run passed {seconds:.0f} s and was ended")
        report.save()
        print(f"\nwatchdog: {seconds:.0f} s passed; figures so far are in the JSON; exiting", flush=True)
        os._exit(3)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()


@contextmanager
def section(report: Report, title: str) -> Iterator[None]:
    report.section(title)
    started = time.monotonic()
    try:
        yield
    except Exception as exc:  # a section failing is a result to print, not the end of the run
        report.note(f"{title}: section failed: {one_line(exc)}")
        traceback.print_exc(limit=3, file=sys.stdout)
    report.say(f"({title}: {time.monotonic() - started:.0f} s)")


def timed(step: Callable[[], object], batch: int, seconds: float, warmup: int = 3) -> Timing:
    """Warm up (at most `warmup` calls, fewer when they already took `seconds`), then time calls for
    `seconds` (at least MIN_ITERATIONS)."""
    started = time.perf_counter()
    for _ in range(warmup):
        step()
        if time.perf_counter() - started > seconds:
            break
    samples: list[float] = []
    began = time.perf_counter()
    while len(samples) < MAX_ITERATIONS:
        t0 = time.perf_counter()
        step()
        samples.append(time.perf_counter() - t0)
        if len(samples) >= MIN_ITERATIONS and time.perf_counter() - began >= seconds:
            break
    values = np.array(samples)
    return Timing(
        batch=batch,
        iterations=len(samples),
        items_per_s=float(batch * len(samples) / values.sum()),
        p50_ms=float(np.percentile(values, 50) * 1000),
        p99_ms=float(np.percentile(values, 99) * 1000),
        mean_ms=float(values.mean() * 1000),
    )


# --- Engines and inputs -----------------------------------------------------------------------------------------------


def cuda_problem() -> str | None:
    """None when the CUDA EP can run here, else why not (one line)."""
    try:
        from edge_sdk.backends.onnxruntime import providers

        if "CUDAExecutionProvider" not in providers.available_providers():
            return f"CUDAExecutionProvider is not in this onnxruntime ({providers.available_providers()})"
        return providers.provider_load_problem("CUDAExecutionProvider")
    except Exception as exc:
        return one_line(exc)


def open_runner(prepared: Any, cuda: dict[str, Any] | None = None, **engine: Any) -> Any:
    """An active runner over `prepared`'s engine with runtime options changed (the engine is the same)."""
    from edge_sdk.backends.onnxruntime.runner import OnnxRuntimeRunner

    options = prepared.profile.engine
    if cuda:
        providers = [p.model_copy(update=cuda) if p.type == "cuda" else p for p in options.execution_providers]
        options = options.model_copy(update={"execution_providers": providers})
    if engine:
        options = options.model_copy(update=engine)
    runner = OnnxRuntimeRunner(prepared.entry.directory, options, prepared.precision)
    runner.activate()
    return runner


class Inputs:
    """The largest batch of one input, generated once; smaller batches are its leading slices."""

    def __init__(self, name: str, array: np.ndarray):
        self.name = name
        self.array = array

    def numpy(self, batch: int) -> dict[str, Any]:
        return {self.name: self.array[:batch]}

    def device(self, batch: int) -> dict[str, Any]:
        import onnxruntime

        return {self.name: onnxruntime.OrtValue.ortvalue_from_numpy(self.array[:batch], "cuda", 0)}

    def pinned(self, batch: int) -> dict[str, Any]:
        from edge_sdk.backends.onnxruntime.host_memory import pinned_empty

        buffer = pinned_empty(self.array[:batch].shape, self.array.dtype)
        np.copyto(buffer, self.array[:batch])
        return {self.name: buffer}


def pinned_source() -> str:
    """Which allocator pinned_empty uses here, or why none works."""
    from edge_sdk.backends.onnxruntime import host_memory

    for name, allocate in host_memory._ALLOCATORS:
        try:
            allocate((1,), np.dtype(np.uint8))
            return name
        except Exception:
            continue
    try:
        host_memory.pinned_empty((1,), np.uint8)
    except Exception as exc:
        return f"none ({one_line(exc)})"
    return "unknown"


def sweep(
    report: Report,
    budget: Budget,
    args: argparse.Namespace,
    model: str,
    variant: str,
    make_runner: Callable[[], Any],
    feed: Callable[[int], dict[str, Any]],
    reference: Callable[[int], dict[str, np.ndarray]] | None = None,
    batches: list[int] | None = None,
    **extra: Any,
) -> None:
    """One variant over every batch: a row per batch, or one line per failure."""
    if not budget.allows(f"{model} / {variant}"):
        return
    try:
        runner = make_runner()
    except Exception as exc:
        report.row(model, variant, None, error=f"cannot open: {one_line(exc)}", **extra)
        return
    try:
        feeding = getattr(runner, "feeding", "-")
        report.note(f"{model} / {variant}: feeding {feeding}, {describe_session(runner)}")
        extra = {"feeding": feeding, **extra}
        failed_at: int | None = None
        for batch in batches or args.batches:
            if failed_at is not None:
                report.row(
                    model, variant, None, error=f"skipped: batch {failed_at} ran out of memory", batch=batch, **extra
                )
                continue
            if not budget.allows(f"{model} / {variant} / batch {batch}"):
                return
            inputs: dict[str, Any] | None = None
            try:
                inputs = feed(batch)
                check = ""
                if reference is not None and batch == min(batches or args.batches):
                    try:
                        check = compare(runner.infer(inputs), reference(batch))
                    except Exception as exc:  # a failed check must not cost the timing
                        check = f"check failed: {one_line(exc)}"
                timing = timed(partial(runner.infer, inputs), batch, args.seconds)
                report.row(model, variant, timing, check=check, **extra)
            except Exception as exc:
                report.row(model, variant, None, error=one_line(exc), batch=batch, **extra)
                if out_of_memory(exc):
                    failed_at = batch
            finally:
                inputs = None
                gc.collect()
    finally:
        runner.deactivate()
        gc.collect()


def compare(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> str:
    """The largest absolute difference against the CPU engine's output (`want` holds one output, maybe
    a leading slice of it, e.g. the detector's top score)."""
    name = next(iter(want))
    if name not in got:
        return f"no output {name} to compare"
    b = np.asarray(want[name], np.float64)
    a = np.asarray(got[name], np.float64)
    if a.ndim == b.ndim:
        a = a[tuple(slice(0, n) for n in b.shape)]
    if a.shape != b.shape:
        return f"{name}: shape {a.shape} vs CPU {b.shape}"
    return f"{name} max |diff| vs CPU {float(np.abs(a - b).max()):.2g}"


INTERESTING_OPTIONS = ("device_id", "enable_cuda_graph", "use_tf32", "prefer_nhwc", "cudnn_conv_algo_search")


def describe_session(runner: Any) -> str:
    """The providers a runner's session uses and the CUDA options that matter for speed."""
    session = getattr(runner, "_session", None) or getattr(runner, "session", None)
    if session is None:
        return "no session"
    providers = list(session.get_providers())
    options = session.get_provider_options().get("CUDAExecutionProvider", {})
    shown = {k: options[k] for k in INTERESTING_OPTIONS if k in options}
    return f"providers {providers}" + (f", CUDA options {shown}" if shown else "")


# --- Sections ---------------------------------------------------------------------------------------------------------


def environment(report: Report, args: argparse.Namespace) -> None:
    import onnxruntime

    from edge_sdk.backends.onnxruntime import providers

    meta: dict[str, Any] = {
        "args": vars(args) | {"batches": args.batches},
        "python": platform.python_version(),
        "numpy": np.__version__,
        "onnxruntime": f"{onnxruntime.__version__} ({Path(onnxruntime.__file__).parent})",
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "providers": {
            name: providers.provider_load_problem(name) or "usable" for name in providers.available_providers()
        },
        "modules": {m: importlib.util.find_spec(m) is not None for m in ("torch", "cupy", "cuda", "onnx", "cv2")},
    }
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=15,
        )
        meta["gpu"] = done.stdout.strip() or done.stderr.strip()
    except Exception as exc:
        meta["gpu"] = f"nvidia-smi: {one_line(exc)}"
    meta["cuda_problem"] = cuda_problem()
    meta["pinned_memory"] = pinned_source() if meta["cuda_problem"] is None else "not tried (no CUDA)"
    report.meta = meta
    for key, value in meta.items():
        report.say(f"- {key}: {value}")
    report.save()


@cache
def cnn_inputs(top: int) -> tuple[Inputs, Inputs]:
    """Float NCHW images and uint8 NHWC frames for the CNN, `top` of each (made once per run)."""
    rng = np.random.default_rng(0)
    floats = rng.standard_normal((top, 3, CNN_SIZE, CNN_SIZE), dtype=np.float32)
    frames = rng.integers(0, 256, (top, CNN_SIZE, CNN_SIZE, 3), dtype=np.uint8)
    return Inputs("images", floats), Inputs("frame", frames)


def cnn_gpu(report: Report, budget: Budget, args: argparse.Namespace, work: Path, cache: Any, catalog: Any) -> None:
    from edge_sdk.core.preprocess import PreprocessSpec
    from edge_sdk.engines.engine import prepare_engine
    from edge_sdk.graph.options import GraphOptions
    from tools.harness.onnx_models import resnet18_like

    problem = cuda_problem()
    if problem:
        report.say(f"skipped: the CUDA EP cannot run here: {problem}")
        return
    model = resnet18_like(work / "resnet18_like.onnx")
    floats, frames = cnn_inputs(max(args.batches))
    cpu = prepare_engine(model, catalog.load("x86-cpu"), "fp32", cache)
    with_cpu = open_runner(cpu)
    references: dict[int, dict[str, np.ndarray]] = {}

    def reference(batch: int) -> dict[str, np.ndarray]:
        if batch not in references:
            references[batch] = with_cpu.infer(floats.numpy(batch))
        return references[batch]

    gpu = catalog.load("x86-nvidia")
    fp32 = prepare_engine(model, gpu, "fp32", cache)
    name = "CNN (ResNet-18 size)"
    rows: list[tuple[str, Callable[[], Any], Callable[[int], dict[str, Any]], bool, str]] = [
        ("CUDA fp32, numpy, session.run (io_binding off)", lambda: open_runner(fp32, io_binding="off"), floats.numpy, True, "fp32"),
        ("CUDA fp32, numpy, io_binding auto (default)", lambda: open_runner(fp32), floats.numpy, True, "fp32"),
        ("CUDA fp32, page-locked host, I/O binding", lambda: open_runner(fp32), floats.pinned, True, "fp32"),
        ("CUDA fp32, device-resident, I/O binding", lambda: open_runner(fp32), floats.device, True, "fp32"),
        ("CUDA fp32, numpy, CUDA graph", lambda: open_runner(fp32, cuda={"cuda_graph": True}), floats.numpy, True, "fp32"),
        ("CUDA fp32, device-resident, CUDA graph", lambda: open_runner(fp32, cuda={"cuda_graph": True}), floats.device, True, "fp32"),
    ]  # fmt: skip
    for variant, make, feed, checked, precision in rows:
        sweep(report, budget, args, name, variant, make, feed, reference if checked else None, precision=precision)
    with_cpu.deactivate()
    if not budget.allows("fp16 engine"):
        return
    fp16 = prepare_engine(model, gpu, "fp16", cache)
    report.note(
        "x86-nvidia fp16 without TensorRT: the SDK converts the graph to float16 for the CUDA EP "
        f"(onnxruntime.transformers.float16): {fp16.entry.manifest.get('facts', {}).get('fp16')}"
    )
    nhwc, nhwc_graph = {"prefer_nhwc": True}, {"prefer_nhwc": True, "cuda_graph": True}
    fp16_rows: list[tuple[str, dict[str, Any], Callable[[int], dict[str, Any]]]] = [
        ("x86-nvidia fp16 engine, numpy", {}, floats.numpy),
        ("x86-nvidia fp16 engine, device-resident", {}, floats.device),
        ("x86-nvidia fp16 engine, prefer_nhwc, device-resident", nhwc, floats.device),
        ("x86-nvidia fp16 engine, prefer_nhwc, CUDA graph, device-resident", nhwc_graph, floats.device),
        ("x86-nvidia fp16 engine, prefer_nhwc, CUDA graph, page-locked host", nhwc_graph, floats.pinned),
    ]
    for variant, cuda, feed in fp16_rows:
        sweep(report, budget, args, name, variant, partial(open_runner, fp16, cuda), feed, reference, precision="fp16")
    sweep(report, budget, args, name, "CUDA fp32, prefer_nhwc, CUDA graph, device-resident",
          partial(open_runner, fp32, nhwc_graph), floats.device, reference, precision="fp32")  # fmt: skip
    if not budget.allows("uint8 folded CNN"):
        return
    # 224x224 frames in; the model has a fixed 224x224 input, so the fold needs the resize (a no-op size here)
    spec = PreprocessSpec(dtype="float32", layout="nchw", color="rgb", resize=(CNN_SIZE, CNN_SIZE), **IMAGENET)
    folded = prepare_engine(model, gpu, "fp32", cache, graph=GraphOptions(preprocess=spec))
    report.note(f"uint8 folded CNN: engine inputs {[m.describe() for m in folded.inputs]}")
    for variant, feed in (
        ("CUDA fp32, uint8 frames folded, numpy", frames.numpy),
        ("CUDA fp32, uint8 frames folded, page-locked host", frames.pinned),
        ("CUDA fp32, uint8 frames folded, device-resident", frames.device),
    ):
        sweep(report, budget, args, name, variant, lambda: open_runner(folded), feed, precision="fp32", input="uint8")


def torch_reference(report: Report, budget: Budget, args: argparse.Namespace) -> None:
    if importlib.util.find_spec("torch") is None:
        report.say("skipped: PyTorch is not installed here")
        return
    if not budget.allows("PyTorch reference"):
        return
    timeout = max(10.0, min(budget.left() - budget.reserve, 40 + 12 * len(args.batches) * args.seconds))
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--torch-worker",
        "--seconds",
        str(args.seconds),
        "--batches",
        ",".join(map(str, args.batches)),
        "--total-seconds",
        str(timeout - 5),
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        output = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        report.note(f"PyTorch worker passed its {timeout:.0f} s; rows so far kept")
        done = subprocess.CompletedProcess(command, -1, output, "")
    lines = done.stdout.splitlines()
    for line in lines:
        if line.startswith("TORCH "):
            record = json.loads(line[6:])
            timing = Timing(**record["timing"]) if record.get("timing") else None
            report.row(
                "CNN (ResNet-18 size)",
                record["variant"],
                timing,
                error=record.get("error", ""),
                batch=record["batch"],
                precision=record["precision"],
            )
        elif line.startswith("TORCHNOTE "):
            report.note(line[10:])
    if done.returncode not in (0, -1):
        tail = " | ".join((done.stderr or "").strip().splitlines()[-3:])
        report.note(f"PyTorch worker exited {done.returncode}: {tail}")


def torch_worker(args: argparse.Namespace) -> None:
    """Runs in a subprocess: PyTorch's ResNet-18 fp32 and fp16, one JSON line per batch."""
    deadline = time.monotonic() + args.total_seconds

    def emit(variant: str, precision: str, batch: int, timing: Timing | None = None, error: str = "") -> None:
        record = {"variant": variant, "precision": precision, "batch": batch, "error": error}
        record["timing"] = timing.__dict__ if timing else None
        print("TORCH " + json.dumps(record), flush=True)

    import torch

    if not torch.cuda.is_available():
        print("TORCHNOTE PyTorch sees no CUDA device; skipped", flush=True)
        return
    torch.backends.cudnn.benchmark = True
    print(
        f"TORCHNOTE torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}, "
        f"{torch.cuda.get_device_name(0)}; cudnn.allow_tf32={torch.backends.cudnn.allow_tf32}, "
        f"matmul.allow_tf32={torch.backends.cuda.matmul.allow_tf32}",
        flush=True,
    )

    def step(net: Any, x: Any) -> None:
        with torch.inference_mode():
            net(x)
        torch.cuda.synchronize()

    for precision, dtype, layout in (
        ("fp32", torch.float32, torch.channels_last),
        ("fp16", torch.float16, torch.channels_last),
        ("fp16", torch.float16, torch.contiguous_format),
    ):
        named = "channels_last" if layout is torch.channels_last else "NCHW"
        variant = f"PyTorch {precision}, {named}, device-resident"
        net = torch_resnet18(torch).cuda().eval().to(dtype=dtype, memory_format=layout)
        for batch in args.batches:
            if time.monotonic() > deadline - 2 * args.seconds:
                emit(variant, precision, batch, error="skipped: worker time guard")
                continue
            x = None
            try:
                x = torch.randn(batch, 3, CNN_SIZE, CNN_SIZE, device="cuda", dtype=dtype)
                x = x.contiguous(memory_format=layout)
                emit(variant, precision, batch, timed(partial(step, net, x), batch, args.seconds, warmup=5))
            except Exception as exc:
                emit(variant, precision, batch, error=one_line(exc))
            finally:
                x = None
                torch.cuda.empty_cache()
        net = None


def torch_resnet18(torch: Any) -> Any:
    """torchvision's ResNet-18 layout (the same as tools/harness/onnx_models.resnet18_like), random weights."""
    nn = torch.nn

    class Basic(nn.Module):  # type: ignore[name-defined]
        def __init__(self, c_in: int, c_out: int, stride: int):
            super().__init__()
            self.a = nn.Sequential(nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU())
            self.b = nn.Sequential(nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False), nn.BatchNorm2d(c_out))
            needs_down = stride != 1 or c_in != c_out
            self.down = (
                nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))
                if needs_down
                else nn.Identity()
            )

        def forward(self, x: Any) -> Any:
            return torch.relu(self.b(self.a(x)) + self.down(x))

    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    c_in = 64
    for c_out, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [Basic(c_in, c_out, stride), Basic(c_out, c_out, 1)]
        c_in = c_out
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000)]
    return nn.Sequential(*layers)


def detector_engines(cache: Any, catalog: Any, profile: str, precision: Any) -> Any:
    from edge_sdk.core.model_file import ModelFile
    from edge_sdk.engines.engine import prepare_engine
    from edge_sdk.pipeline.config import load_pipeline
    from edge_sdk.pipeline.engine_setup import pipeline_graph

    config = load_pipeline(REPO / "pipelines" / "demo.yaml")
    detector = ModelFile.load(config.model.path)
    return prepare_engine(detector, catalog.load(profile), precision, cache, graph=pipeline_graph(config, detector))


@cache
def detector_frames(top: int) -> Inputs:
    from edge_sdk.core.opencv import import_cv2
    from edge_sdk.graph.options import FRAME_INPUT

    cv2 = import_cv2()
    frame = cv2.resize(cv2.imread(str(ASTRONAUT)), FRAME_SIZE)
    return Inputs(FRAME_INPUT, np.ascontiguousarray(np.broadcast_to(frame, (top, *frame.shape))))


def detector(report: Report, budget: Budget, args: argparse.Namespace, cache: Any, catalog: Any) -> None:
    name = "detector (demo, 640x480 in)"
    frames = detector_frames(max(args.batches))
    cpu = detector_engines(cache, catalog, "x86-cpu", "fp32")
    with_cpu = open_runner(cpu)
    references: dict[int, dict[str, np.ndarray]] = {}

    def reference(batch: int) -> dict[str, np.ndarray]:
        """The CPU engine's top score per frame (lower-ranked boxes may trade places between providers)."""
        if batch not in references:
            outputs = with_cpu.infer(frames.numpy(batch))
            name = "detection_scores:0" if "detection_scores:0" in outputs else next(iter(outputs))
            value = outputs[name]
            references[batch] = {name: value[:, :1] if value.ndim >= 2 else value}
        return references[batch]

    sweep(
        report,
        budget,
        args,
        name,
        f"CPU EP x86-cpu, {os.cpu_count()} cores, numpy",
        lambda: open_runner(cpu),
        frames.numpy,
        batches=cpu_batches(args),
        precision="fp32",
    )
    problem = cuda_problem()
    if problem:
        report.say(f"GPU rows skipped: the CUDA EP cannot run here: {problem}")
        return
    fp32 = detector_engines(cache, catalog, "x86-nvidia", "fp32")
    rows: list[tuple[str, Callable[[], Any], Callable[[int], dict[str, Any]]]] = [
        ("CUDA fp32, numpy, session.run (io_binding off)", lambda: open_runner(fp32, io_binding="off"), frames.numpy),
        ("CUDA fp32, numpy, io_binding auto (default)", lambda: open_runner(fp32), frames.numpy),
        ("CUDA fp32, page-locked host, I/O binding", lambda: open_runner(fp32), frames.pinned),
        ("CUDA fp32, device-resident, I/O binding", lambda: open_runner(fp32), frames.device),
        (
            "CUDA fp32, CUDA graph (expected refused: Loop)",
            lambda: open_runner(fp32, cuda={"cuda_graph": True}),
            frames.numpy,
        ),
    ]
    for variant, make, feed in rows:
        sweep(report, budget, args, name, variant, make, feed, reference, precision="fp32")
    with_cpu.deactivate()
    if budget.allows("detector fp16"):
        fp16 = detector_engines(cache, catalog, "x86-nvidia", "fp16")
        sweep(
            report,
            budget,
            args,
            name,
            "x86-nvidia fp16 engine, numpy",
            lambda: open_runner(fp16),
            frames.numpy,
            reference,
            precision="fp16",
        )


def cpu_batches(args: argparse.Namespace) -> list[int]:
    return [b for b in args.batches if b <= CPU_MAX_BATCH] or [min(args.batches)]


def split_detector(report: Report, budget: Budget, args: argparse.Namespace, cache: Any, catalog: Any) -> None:
    """The demo detector as a pipeline with `decode: sdk` builds it: cut after its box head, decoded on the host."""
    from edge_sdk.core.model_file import ModelFile
    from edge_sdk.engines.engine import prepare_engine
    from edge_sdk.pipeline.config import load_pipeline
    from edge_sdk.pipeline.engine_setup import pipeline_graph
    from edge_sdk.postprocess.ssd import SsdPostprocessor
    from edge_sdk.postprocess.ssd_decode import BOX_ENCODINGS, CLASS_SCORES

    config = load_pipeline(REPO / "pipelines" / "demo.yaml")
    post = config.postprocess.model_copy(update={"decode": "sdk", "decode_model": config.model.path})
    config = config.model_copy(update={"postprocess": post})
    detector = ModelFile.load(config.model.path)
    graph = pipeline_graph(config, detector)
    decoder = SsdPostprocessor(post).decoder  # type: ignore[arg-type]
    threshold = float(getattr(post, "score_threshold", 0.5))
    frames = detector_frames(max(args.batches))
    name = "detector split (decode: sdk)"

    def engine(profile: str) -> Any:
        return prepare_engine(detector, catalog.load(profile), "fp32", cache, graph=graph)

    cpu = engine("x86-cpu")
    report.note(f"{name}: engine inputs {[m.describe() for m in cpu.inputs]}, graph passes {graph}")
    sweep(
        report,
        budget,
        args,
        name,
        f"CPU EP x86-cpu, {os.cpu_count()} cores, numpy, engine only",
        lambda: open_runner(cpu),
        frames.numpy,
        batches=cpu_batches(args),
        precision="fp32",
    )
    problem = cuda_problem()
    if problem:
        report.say(f"GPU rows skipped: the CUDA EP cannot run here: {problem}")
        return
    gpu = engine("x86-nvidia")

    class Decoded:
        """The engine, then the host decode of every frame at the pipeline's threshold (one thread)."""

        def __init__(self) -> None:
            self.runner = open_runner(gpu)
            self.feeding = self.runner.feeding
            self._session = self.runner._session

        def infer(self, feed: dict[str, Any]) -> dict[str, Any]:
            return self.decode(self.runner.infer(feed))

        @staticmethod
        def decode(outputs: dict[str, np.ndarray]) -> dict[str, Any]:
            boxes, scores = outputs[BOX_ENCODINGS], outputs[CLASS_SCORES]
            found = [decoder(boxes[i], scores[i], threshold) for i in range(len(boxes))]  # type: ignore[misc]
            return {"boxes": np.array([len(f.scores) for f in found])}

        def deactivate(self) -> None:
            self.runner.deactivate()

    class Pipelined(Decoded):
        """The engine on one batch while a second thread decodes the previous one (the pipeline's split
        between its inference and output stages); a call returns the previous batch's detections."""

        def __init__(self) -> None:
            super().__init__()
            self._decoder = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="decode")
            self._pending: concurrent.futures.Future[dict[str, Any]] | None = None

        def infer(self, feed: dict[str, Any]) -> dict[str, Any]:
            outputs = self.runner.infer(feed)
            previous, self._pending = self._pending, self._decoder.submit(self.decode, outputs)
            return previous.result() if previous is not None else {}

        def deactivate(self) -> None:
            if self._pending is not None:
                self._pending.result()
            self._decoder.shutdown()
            super().deactivate()

    rows: list[tuple[str, Callable[[], Any], Callable[[int], dict[str, Any]]]] = [
        ("CUDA fp32, numpy, I/O binding, engine only", lambda: open_runner(gpu), frames.numpy),
        ("CUDA fp32, page-locked host, I/O binding, engine only", lambda: open_runner(gpu), frames.pinned),
        ("CUDA fp32, device-resident, I/O binding, engine only", lambda: open_runner(gpu), frames.device),
        (
            "CUDA fp32, prefer_nhwc, device-resident, I/O binding, engine only",
            lambda: open_runner(gpu, cuda={"prefer_nhwc": True}),
            frames.device,
        ),
        (
            "CUDA fp32, numpy, CUDA graph, engine only",
            lambda: open_runner(gpu, cuda={"cuda_graph": True}),
            frames.numpy,
        ),
        ("CUDA fp32, numpy, I/O binding, engine + host decode", Decoded, frames.numpy),
        ("CUDA fp32, page-locked host, engine + host decode pipelined on a second thread", Pipelined, frames.pinned),
        ("CUDA fp32, numpy, engine + host decode pipelined on a second thread", Pipelined, frames.numpy),
    ]
    for variant, make, feed in rows:
        sweep(report, budget, args, name, variant, make, feed, precision="fp32")


def limits(report: Report, budget: Budget, args: argparse.Namespace, work: Path, cache: Any, catalog: Any) -> None:
    """Where the detector's time goes on CUDA: nodes per provider, Memcpy nodes, time per op and provider."""
    import onnx
    import onnxruntime

    from edge_sdk.backends.onnxruntime.builder import OPTIMIZED_MODEL
    from edge_sdk.backends.onnxruntime.session import provider_list, session_options

    problem = cuda_problem()
    profile = "x86-nvidia" if problem is None else "x86-cpu"
    if problem:
        report.say(f"the CUDA EP cannot run here ({problem}); profiling the CPU engine so the section's code runs")
    prepared = detector_engines(cache, catalog, profile, "fp32")
    batches = sorted({1, min(32, max(args.batches))})
    frames = detector_frames(max(args.batches))
    for batch in batches:
        if not budget.allows(f"limits at batch {batch}"):
            return
        so = session_options(prepared.profile.engine, optimization=None)
        so.enable_profiling = True
        so.profile_file_prefix = str(work / f"detector_profile_b{batch}")
        saved = work / f"detector_as_run_b{batch}.onnx"
        so.optimized_model_filepath = str(saved)
        so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
        providers = provider_list(prepared.profile.engine, prepared.precision, prepared.entry.directory)
        session = onnxruntime.InferenceSession(str(prepared.entry.directory / OPTIMIZED_MODEL), so, providers=providers)
        feed = frames.numpy(batch)
        outputs = [o.name for o in session.get_outputs()]
        for _ in range(PROFILE_WARMUP + PROFILE_RUNS):  # a fixed count: a Loop body is profiled per iteration
            session.run(outputs, feed)
        trace = Path(session.end_profiling())
        assigned = node_assignment(session)
        ran = collections.Counter(n.op_type for n in onnx.load(str(saved), load_external_data=False).graph.node)
        memcpy = {op: count for op, count in ran.items() if op.startswith("Memcpy")}
        ops, runs, run_ms = op_times(trace, PROFILE_RUNS)
        items_per_s = batch / (run_ms / 1000) if run_ms else 0.0
        per_run = sorted(ops.items(), key=lambda kv: -kv[1]["us"])
        cpu_us = sum(v["us"] for (op, provider), v in ops.items() if provider == "CPUExecutionProvider")
        entry = {
            "batch": batch,
            "providers": session.get_providers(),
            "items_per_s_profiled": round(items_per_s, 2),
            "model_run_ms_mean": round(run_ms, 3),
            "nodes_per_provider": {ep: len(nodes) for ep, nodes in assigned.items()},
            "ops_on_cpu": sorted(collections.Counter(op for op in assigned.get("CPUExecutionProvider", []))),
            "memcpy_nodes_in_graph_as_run": memcpy,
            "memcpy_nodes_assigned": collections.Counter(
                op for nodes in assigned.values() for op in nodes if op.startswith("Memcpy")
            ),
            "profiled_runs": runs,
            "cpu_node_ms_per_run": round(cpu_us / 1000 / max(runs, 1), 3),
            "top_ops": [
                {
                    "op": op,
                    "provider": provider,
                    "nodes": v["nodes"],
                    "ms_per_run": round(v["us"] / 1000 / max(runs, 1), 3),
                }
                for (op, provider), v in per_run[:15]
            ],
        }
        report.limits[f"batch {batch}"] = entry
        report.say(
            f"batch {batch} on {session.get_providers()[0]}: {items_per_s:,.1f} frames/s while profiled, model_run {run_ms:.2f} ms; "
            f"nodes per provider {entry['nodes_per_provider']}; Memcpy nodes in the graph as run {memcpy or 'none'}"
        )
        report.say(f"ops on the CPU provider: {', '.join(entry['ops_on_cpu']) or 'none'}")
        report.say(
            f"CPU-provider nodes: {entry['cpu_node_ms_per_run']:.2f} ms of {run_ms:.2f} ms per run (a Loop's time "
            "includes the nodes of its body, listed too; CUDA node times are launch times: kernels run "
            "asynchronously, and GPU time shows in the node that waits for it, a MemcpyToHost or a CPU node)"
        )
        report.say("| op | provider | nodes | ms per run | share of model_run |")
        report.say("|---|---|---:|---:|---:|")
        for item in entry["top_ops"]:
            share = item["ms_per_run"] / run_ms if run_ms else 0.0
            report.say(
                f"| {item['op']} | {item['provider']} | {item['nodes']} | {item['ms_per_run']:.3f} | {share:.0%} |"
            )
        report.save()
        session = None
        gc.collect()


def node_assignment(session: Any) -> dict[str, list[str]]:
    """Op types per provider, from ONNX Runtime's record of its partitioning (1.22+), or {} without it."""
    try:
        info = session.get_provider_graph_assignment_info()
    except Exception:
        return {}
    assigned: dict[str, list[str]] = collections.defaultdict(list)
    for subgraph in info:
        assigned[subgraph.ep_name] += [node.op_type for node in subgraph.get_nodes()]
    return dict(assigned)


def op_times(trace: Path, last: int) -> tuple[dict[tuple[str, str], dict[str, Any]], int, float]:
    """Total node time per (op, provider) over the `last` runs of a profile (the warm-up runs, with their
    convolution algorithm search, left out), the number of runs counted and their mean model_run in ms."""
    events = json.loads(trace.read_text())
    runs = sorted(
        (e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"), key=lambda e: e["ts"]
    )
    runs = runs[-last:]
    windows = [(e["ts"], e["ts"] + e["dur"]) for e in runs]
    ops: dict[tuple[str, str], dict[str, Any]] = collections.defaultdict(lambda: {"us": 0, "names": set()})
    for event in events:
        args = event.get("args", {})
        counted = any(start <= event.get("ts", -1) <= end for start, end in windows)
        if (
            counted
            and event.get("cat") == "Node"
            and "op_name" in args
            and event.get("name", "").endswith("_kernel_time")
        ):
            key = (args["op_name"], args.get("provider", "?"))
            ops[key]["us"] += event.get("dur", 0)
            ops[key]["names"].add(event["name"])
    result = {key: {"us": v["us"], "nodes": len(v["names"])} for key, v in ops.items()}
    return result, len(runs), (float(np.mean([e["dur"] for e in runs])) / 1000 if runs else 0.0)


def cnn_cpu(report: Report, budget: Budget, args: argparse.Namespace, work: Path, cache: Any, catalog: Any) -> None:
    from edge_sdk.engines.engine import prepare_engine
    from tools.harness.onnx_models import resnet18_like

    model = resnet18_like(work / "resnet18_like.onnx")
    floats, _ = cnn_inputs(max(args.batches))
    cpu = prepare_engine(model, catalog.load("x86-cpu"), "fp32", cache)
    variant = f"CPU EP x86-cpu, {os.cpu_count()} cores, numpy"
    sweep(
        report,
        budget,
        args,
        "CNN (ResNet-18 size)",
        variant,
        lambda: open_runner(cpu),
        floats.numpy,
        batches=cpu_batches(args),
        precision="fp32",
    )


def targets(report: Report) -> None:
    cnn, det = "CNN (ResNet-18 size)", "detector (demo, 640x480 in)"

    def sdk_fp32(v: str) -> bool:
        return v.startswith("CUDA fp32")

    def target(name: str, value: float | None, goal: float, unit: str, detail: str) -> None:
        verdict = "n/a" if value is None else ("PASS" if value >= goal else "FAIL")
        shown = "-" if value is None else f"{value:,.2f}{unit}"
        report.targets.append({"target": name, "value": value, "goal": goal, "verdict": verdict, "detail": detail})
        report.say(f"| {name} | {shown} | {goal:,g}{unit} | **{verdict}** | {detail} |")

    def where(row: dict[str, Any] | None) -> str:
        return f"{row['variant']}, batch {row['batch']}" if row else "no figure"

    report.say("| target | measured | goal | verdict | best row |")
    report.say("|---|---:|---:|---|---|")
    best32 = report.best(cnn, sdk_fp32)
    target(
        "CNN through the SDK, fp32, items/s", best32["items_per_s"] if best32 else None, CNN_TARGET, "", where(best32)
    )
    floats = report.best(cnn, lambda v: sdk_fp32(v) and "uint8" not in v)
    if floats:
        report.say(f"| (CNN SDK fp32, float input only) | {floats['items_per_s']:,.1f} | | | {where(floats)} |")
    sdk16 = report.best(cnn, lambda v: v.startswith("x86-nvidia fp16"))
    for layout in ("channels_last", "NCHW"):
        torch16 = report.best(cnn, lambda v, layout=layout: v.startswith(f"PyTorch fp16, {layout}"))
        ratio = sdk16["items_per_s"] / torch16["items_per_s"] if sdk16 and torch16 else None
        target(f"CNN x86-nvidia fp16 / PyTorch fp16 {layout}", ratio, FP16_TARGET, "x", f"{where(sdk16)} vs {where(torch16)}")  # fmt: skip
    torch32 = report.best(cnn, lambda v: v.startswith("PyTorch fp32"))
    if best32 and torch32:
        report.say(
            f"| (CNN SDK fp32 / PyTorch fp32) | {best32['items_per_s'] / torch32['items_per_s']:.2f}x | | | {where(torch32)} |"
        )
    gpu = report.best(det, lambda v: v.startswith(("CUDA", "x86-nvidia")))
    cpu = report.best(det, lambda v: v.startswith("CPU EP"))
    ratio = gpu["items_per_s"] / cpu["items_per_s"] if gpu and cpu else None
    target("detector GPU / CPU (all cores), best batches", ratio, DETECTOR_TARGET, "x", f"{where(gpu)} vs {where(cpu)}")
    split = "detector split (decode: sdk)"
    for what, picked in (
        ("engine only", lambda v: v.startswith("CUDA") and v.endswith("engine only")),
        ("engine + host decode", lambda v: "host decode" in v),
    ):
        gpu = report.best(split, picked)
        ratio = gpu["items_per_s"] / cpu["items_per_s"] if gpu and cpu else None
        target(f"detector split, {what}, GPU / uncut CPU", ratio, DETECTOR_TARGET, "x", f"{where(gpu)} vs {where(cpu)}")
        split_cpu = report.best(split, lambda v: v.startswith("CPU EP"))
        if gpu and split_cpu:
            shown = gpu["items_per_s"] / split_cpu["items_per_s"]
            report.say(f"| (detector split, {what}, GPU / split CPU) | {shown:.2f}x | | | {where(split_cpu)} |")
    report.save()


# --- Main -------------------------------------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="timed seconds per measurement (after warm-up)")
    parser.add_argument("--batches", default="1,8,32,128,256", help="comma-separated batch sizes")
    parser.add_argument("--total-seconds", type=float, default=400.0, help="no measurement starts after this")
    parser.add_argument("--sections", default=",".join(SECTIONS), help=f"any of {','.join(SECTIONS)}")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.batches = sorted({int(b) for b in args.batches.split(",") if b.strip()})
    if not args.batches or min(args.batches) < 1 or max(args.batches) > 1024:
        parser.error("--batches: expected sizes 1..1024")
    args.sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = set(args.sections) - set(SECTIONS)
    if unknown:
        parser.error(f"--sections: unknown {sorted(unknown)}; expected some of {','.join(SECTIONS)}")
    return args


def main() -> None:
    args = parse_args()
    if args.torch_worker:
        torch_worker(args)
        return
    json_paths = [Path(os.environ["OUT"]) / "gpu_throughput.json"] if os.environ.get("OUT") else []
    json_paths += [args.json] if args.json else []
    report = Report(json_paths)
    budget = Budget(args.total_seconds, args.seconds, report)
    start_watchdog(report, args.total_seconds + WATCHDOG_GRACE)
    report.say(
        f"# gpu_throughput: {' '.join(sys.argv[1:]) or '(defaults)'}; JSON to {[str(p) for p in json_paths] or 'none'}"
    )
    from edge_sdk.engines.cache import EngineCache
    from edge_sdk.profiles import ProfileCatalog

    catalog = ProfileCatalog(REPO / "device_profiles")
    with tempfile.TemporaryDirectory(prefix="gpu-throughput-") as scratch:
        work = Path(scratch)
        cache = EngineCache(work / "engines")
        with section(report, "environment"):
            environment(report, args)
        if "torch" in args.sections:
            with section(report, "CNN: PyTorch reference (subprocess)"):
                torch_reference(report, budget, args)
        if "cnn" in args.sections:
            with section(report, "CNN through the SDK on CUDA"):
                cnn_gpu(report, budget, args, work, cache, catalog)
        if "detector" in args.sections:
            with section(report, "detector: CPU and CUDA through the SDK"):
                detector(report, budget, args, cache, catalog)
        if "split" in args.sections:
            with section(report, "detector cut after its box head (decode: sdk) on CPU and CUDA"):
                split_detector(report, budget, args, cache, catalog)
        if "limits" in args.sections:
            with section(report, "what limits the GPU: the detector on CUDA"):
                limits(report, budget, args, work, cache, catalog)
        if "cpu" in args.sections:
            with section(report, "CNN on the CPU EP"):
                cnn_cpu(report, budget, args, work, cache, catalog)
        with section(report, "targets"):
            targets(report)
    if budget.skipped:
        report.note(f"time guard skipped {len(budget.skipped)} measurement(s), first: {budget.skipped[0]}")
    report.say(f"\ndone in {time.monotonic() - budget.started:.0f} s")
    report.save()


if __name__ == "__main__":
    main()
