"""The tensorrt backend's CUDA half on a real GPU: copy bandwidth (pageable vs page-locked host memory,
both directions) and launch overheads (a kernel enqueued per call vs one CUDA graph replayed; the
runner's whole call with and without a graph), through cuda-python and pycuda side by side.

Usage (on a CUDA host; tools/gpu/tensorrt_cuda.sh runs it on the NVIDIA H200 host):
  python tools/bench/cuda_buffers.py [--repeats 30] [--json OUT.json]

The kernel that stands in for an engine is tools/harness/kernel_engine.py's (CuPy, NVRTC).
Each figure is the median of --repeats; copies are timed with CUDA events on one stream.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from edge_sdk.backends.tensorrt.cuda_runtime import CudaRuntime, open_cuda  # noqa: E402
from edge_sdk.backends.tensorrt.device_io import DeviceIO  # noqa: E402
from tools.harness.kernel_engine import KernelEngine  # noqa: E402

SIZES = {"1080p frame (6.2 MB)": 1080 * 1920 * 3, "64 MiB": 64 << 20}


def copy_gbps(cuda: CudaRuntime, nbytes: int, pinned: bool, to_device: bool, repeats: int) -> float:
    host = cuda.pinned_empty((nbytes,), np.uint8) if pinned else np.empty(nbytes, np.uint8)
    host[...] = 1
    device = cuda.device_alloc(nbytes)
    stream = cuda.stream()
    start, end = cuda.event(), cuda.event()
    times = []
    for _ in range(repeats + 2):
        start.record(stream)
        if to_device:
            cuda.copy_to_device(device.pointer, host, stream)
        else:
            cuda.copy_to_host(host, device.pointer, stream)
        end.record(stream)
        end.synchronize()
        times.append(end.milliseconds_since(start))
    device.free()
    stream.destroy()
    return nbytes / (statistics.median(times[2:]) / 1000) / 1e9


def launch_us(cuda: CudaRuntime, repeats: int) -> dict[str, float]:
    """Per launch: 100 kernels enqueued one by one then one sync, against one graph of the same 100
    kernels replayed once; and the runner's whole call (copy in, kernel, copy out, sync) with and without
    a graph, for a 1x3x224x224 float32 tensor."""
    engine = KernelEngine((1, 3, 224, 224))
    stream = cuda.stream()
    x = cuda.device_alloc(1 * 3 * 224 * 224 * 4)
    y = cuda.device_alloc(1 * 3 * 224 * 224 * 4)
    engine.set_tensor_address("input", x.pointer)
    engine.set_tensor_address("output", y.pointer)
    engine.enqueue(stream.handle)  # compile
    stream.synchronize()
    plain = []
    for _ in range(repeats):
        began = time.perf_counter()
        for _ in range(100):
            engine.enqueue(stream.handle)
        stream.synchronize()
        plain.append((time.perf_counter() - began) / 100 * 1e6)
    graph = cuda.capture(stream, lambda: [engine.enqueue(stream.handle) for _ in range(100)])
    replayed = []
    for _ in range(repeats):
        began = time.perf_counter()
        graph.launch(stream)
        stream.synchronize()
        replayed.append((time.perf_counter() - began) / 100 * 1e6)
    graph.destroy()
    x.free()
    y.free()
    result = {"kernel_enqueue_us": statistics.median(plain), "kernel_in_graph_us": statistics.median(replayed)}
    feed = {"input": np.random.default_rng(0).standard_normal((1, 3, 224, 224), dtype=np.float32)}
    for label, use_graph in (("runner_call_us", False), ("runner_call_graph_us", True)):
        io = DeviceIO(cuda, KernelEngine((1, 3, 224, 224)), cuda_graph=use_graph)
        for _ in range(3):
            io.run(feed)
        calls = []
        for _ in range(repeats):
            began = time.perf_counter()
            io.run(feed)
            calls.append((time.perf_counter() - began) * 1e6)
        io.close()
        result[label] = statistics.median(calls)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results: dict[str, Any] = {}
    for binding in ("cuda-python", "pycuda"):
        try:
            cuda = open_cuda(binding)
        except Exception as exc:
            print(f"{binding}: not run ({exc})")
            continue
        device = cuda.device()
        row: dict[str, Any] = {
            "device": f"{device.name} sm_{device.compute_capability[0]}{device.compute_capability[1]}"
        }
        for label, nbytes in SIZES.items():
            for pinned in (False, True):
                for to_device in (True, False):
                    key = f"{label} {'pinned' if pinned else 'pageable'} {'H2D' if to_device else 'D2H'}"
                    row[key] = copy_gbps(cuda, nbytes, pinned, to_device, args.repeats)
        row.update(launch_us(cuda, args.repeats))
        results[binding] = row
    bindings = list(results)
    keys = [k for k in results[bindings[0]] if k != "device"] if bindings else []
    print(f"{'':44}" + "".join(f"{b:>16}" for b in bindings))
    print(f"{'device':44}" + "".join(f"{results[b]['device'][:15]:>16}" for b in bindings))
    for key in keys:
        unit = "GB/s" if "H2D" in key or "D2H" in key else "us"
        print(f"{key + ' (' + unit + ')':44}" + "".join(f"{results[b][key]:>16.2f}" for b in bindings))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
