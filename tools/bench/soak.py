"""Soak: a live source faster than inference for several minutes; memory growth and /dev/shm left over.

Usage: python tools/bench/soak.py [--minutes 5] [--fps 60]

Runs the demo detector on a realtime synthetic camera (640x480) through the multi-process runtime
with a JSONL sink, samples the resident memory (VmRSS) of the parent and every stage process after
a warm-up and at the end, then checks /dev/shm for segments and semaphores left behind and the
parent's open file descriptors (sockets, locks) before and after.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from edge_sdk.engines.cache import EngineCache
from edge_sdk.pipeline.config import load_pipeline
from edge_sdk.pipeline.frame_ring import segments_of
from edge_sdk.pipeline.run import run_pipeline
from edge_sdk.profiles import ProfileCatalog

REPO = Path(__file__).resolve().parents[2]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def tree_rss_kib(root: int) -> dict[int, int]:
    children = subprocess.run(["pgrep", "-P", str(root)], capture_output=True, text=True).stdout.split()
    pids = [root, *map(int, children)]
    out = {}
    for pid in pids:
        try:
            out[pid] = rss_kib(pid)
        except OSError:
            continue
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--fps", type=float, default=60.0)
    parser.add_argument("--warmup", type=float, default=30.0, help="seconds before the first memory sample")
    args = parser.parse_args()

    shm_before = set(os.listdir("/dev/shm"))
    fds_before = len(os.listdir("/proc/self/fd"))
    with tempfile.TemporaryDirectory(prefix="edge-sdk-soak-") as scratch:
        uri = (
            f"synthetic://?image={REPO / 'tools' / 'assets' / 'astronaut.jpg'}"
            f"&frames=300&size=640x480&fps={args.fps}&realtime=true"
        )
        path = Path(scratch) / "soak.yaml"
        path.write_text(
            f"name: soak\nmodel: {{path: {REPO / 'models' / 'ssdlite_mobilenet_v2_person.onnx'}}}\n"
            f"sources: [{{uri: '{uri}', name: cam, loop: true}}]\n"
            "postprocess: {type: ssd, labels: [person]}\nsinks: [{type: jsonl, path: soak.jsonl}]\n"
        )
        profile = ProfileCatalog(REPO / "device_profiles").load("x86-cpu")
        stop = threading.Event()
        box: list[object] = []
        runner = threading.Thread(
            target=lambda: box.append(
                run_pipeline(load_pipeline(path), profile, EngineCache(Path(scratch) / "c"), stop=stop)
            )
        )
        runner.start()
        time.sleep(args.warmup)
        first = tree_rss_kib(os.getpid())
        samples = [sum(first.values())]
        end = time.monotonic() + args.minutes * 60 - args.warmup
        while time.monotonic() < end:
            time.sleep(15)
            samples.append(sum(tree_rss_kib(os.getpid()).values()))
        last = tree_rss_kib(os.getpid())
        stop.set()
        runner.join(timeout=60)
        summary = box[0] if box else None
    left = segments_of(os.getpid())  # only this run's: other pipelines may be running on the machine
    semaphores = sorted(name for name in set(os.listdir("/dev/shm")) - shm_before if name.startswith("sem."))
    fds_after = len(os.listdir("/proc/self/fd"))
    growth = (sum(last.values()) - sum(first.values())) / sum(first.values()) * 100
    print(f"soak: {args.minutes} min, live source {args.fps} FPS 640x480, demo detector, default runtime")
    if summary is not None:
        print(
            f"frames delivered {summary.frames}, dropped {summary.dropped}, "  # type: ignore[attr-defined]
            f"latency p50 {summary.latency_p50_ms:.1f} ms p99 {summary.latency_p99_ms:.1f} ms"  # type: ignore[attr-defined]
        )
    print(f"resident memory of parent + stages after {args.warmup:.0f} s warm-up: {sum(first.values()) / 1024:.1f} MiB")
    print(f"at the end: {sum(last.values()) / 1024:.1f} MiB; growth {growth:+.2f}%")
    print(f"samples (MiB): {[round(s / 1024, 1) for s in samples]}")
    print(f"/dev/shm segments left: {left or 'none'}; semaphores created and left: {semaphores or 'none'}")
    print(f"open file descriptors of the parent before -> after the run: {fds_before} -> {fds_after}")


if __name__ == "__main__":
    main()
