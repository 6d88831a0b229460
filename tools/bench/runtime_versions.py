"""The same pipeline on this checkout and on another revision, side by side: FPS, latency, CPU time.

Usage: git worktree add /tmp/edge-sdk-old REV
       python tools/bench/runtime_versions.py --old /tmp/edge-sdk-old [--rounds 3] [--pipeline P]

Rounds alternate between the two trees (PYTHONPATH points the CLI and its stage processes at each
tree's edge_sdk, with this checkout's virtual environment), so the machine's noise hits both alike.
Each round runs `edge-sdk run PIPELINE --json` and reads FPS and capture-to-result latency from the
summary, the wall time of the command, and the CPU seconds of the whole process tree. A live
variant (realtime 30 FPS synthetic camera, 300 frames) shows the latency and the idle CPU cost.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ASTRONAUT = REPO / "tools" / "assets" / "astronaut.jpg"
MODEL = REPO / "models" / "ssdlite_mobilenet_v2_person.onnx"


def live_pipeline(folder: Path) -> Path:
    path = folder / "live.yaml"
    uri = f"synthetic://?image={ASTRONAUT}&frames=30&size=640x480&fps=30&realtime=true"
    path.write_text(
        f"name: live\nmodel: {{path: {MODEL}}}\nsources:\n  - {{uri: '{uri}', name: cam, loop: true, max_frames: 300}}\n"
        "postprocess: {type: ssd, labels: [person]}\nsinks:\n  - {type: jsonl, path: out/live.jsonl}\n"
    )
    return path


def run_once(tree: Path, pipeline: Path, cache: Path) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree), "EDGE_SDK_CACHE_DIR": str(cache)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "edge_sdk.cli.main", "run", str(pipeline), "--profile", "x86-cpu", "--json"],
        capture_output=True, text=True, env=env, cwd=REPO, check=False,
    )  # fmt: skip
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{tree}: edge-sdk run failed ({done.returncode}): {done.stderr[-2000:]}")
    summary = json.loads(done.stdout[done.stdout.index("{") :])
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"fps": summary["fps"], "p50": summary["latency_p50_ms"], "p99": summary["latency_p99_ms"],
            "frames": summary["frames"], "wall": wall, "cpu": cpu}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, required=True, help="a checkout of the revision to compare with")
    parser.add_argument("--pipeline", type=Path, default=REPO / "pipelines" / "demo.yaml")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    trees = {"old": args.old.resolve(), "this": REPO}
    with tempfile.TemporaryDirectory(prefix="edge-sdk-versions-") as tmp:
        folder = Path(tmp)
        variants = {"file (demo)": args.pipeline.resolve(), "live 30 FPS": live_pipeline(folder)}
        for label, pipeline in variants.items():
            results: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
            for name, tree in trees.items():  # warm-up: builds each tree's engine once
                run_once(tree, pipeline, folder / f"cache-{name}")
            for _ in range(args.rounds):
                for name, tree in trees.items():
                    results[name].append(run_once(tree, pipeline, folder / f"cache-{name}"))
            print(f"{label}, {args.rounds} rounds, medians:")
            for name, rounds in results.items():
                med = {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
                print(
                    f"  {name:5s} {med['frames']:5.0f} frames  {med['fps']:6.1f} FPS  p50 {med['p50']:6.1f} ms  "
                    f"p99 {med['p99']:6.1f} ms  wall {med['wall']:5.2f} s  CPU {med['cpu']:6.2f} s"
                )


if __name__ == "__main__":
    main()
