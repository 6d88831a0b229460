"""Start-up: process start to first result, whole-process wall time and steady FPS of the 300-frame demo,
`edge-sdk run` (multi-process and inline) against a plain 20-line OpenCV + ONNX Runtime script.

Usage: python tools/bench/startup.py [--rounds 3] [--video build/demo/demo.mp4]

Each run is a fresh process, as a user starts it, with the engine already cached (one warm-up run
first) and a JSONL sink only. The bench polls the JSONL file every millisecond: "first result" is
the time from starting the process to the first line, "steady FPS" the frames after the first over
the time from the first line to the last, "exit s" the time from the last line to the process's exit
(draining, stopping the stages, the summary). The runs alternate so every variant sees the same load;
medians of the rounds are printed side by side with the ratio to the plain script.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "ssdlite_mobilenet_v2_person.onnx"

PLAIN_SCRIPT = """
import json, sys
import cv2, numpy as np, onnxruntime as ort
video, model, out = sys.argv[1:4]
session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
name = session.get_inputs()[0].name
capture = cv2.VideoCapture(video)
with open(out, "w", buffering=1) as results:
    index = 0
    while True:
        ok, frame = capture.read()
        if not ok:
            break
        tensor = cv2.cvtColor(cv2.resize(frame, (300, 300)), cv2.COLOR_BGR2RGB)[np.newaxis]
        count, boxes, scores, classes = session.run(None, {name: tensor})
        keep = [i for i in range(int(count[0])) if scores[0][i] >= 0.5]
        results.write(json.dumps({"frame": index, "boxes": boxes[0][keep].tolist()}) + "\\n")
        index += 1
"""

PIPELINE = """\
name: startup
model: {{path: {model}}}
preprocess: {{resize: [300, 300], color: rgb, layout: nhwc, dtype: uint8}}
sources: [{{uri: {video}, name: demo}}]
postprocess: {{type: ssd, score_threshold: 0.5, labels: [person]}}
sinks: [{{type: jsonl, path: {out}}}]
runtime: {{mode: {mode}}}
"""


@dataclass(frozen=True)
class Run:
    first_result: float
    wall: float
    frames: int
    steady_fps: float
    exit_after_last: float
    """Seconds from the last result to the process's exit (the stop, the summary)."""


def timed(command: list[str], results: Path, env: dict[str, str]) -> Run:
    """Start `command`, watch `results` grow, and time the first line, the last one and the exit."""
    results.unlink(missing_ok=True)
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    first = last = None
    lines = 0
    offset = 0
    while True:
        done = process.poll() is not None
        if results.exists():
            with results.open("rb") as file:
                file.seek(offset)
                chunk = file.read()
            complete = chunk.count(b"\n")
            if complete:
                now = time.perf_counter()
                first = first if first is not None else now
                last = now
                lines += complete
                offset += chunk.rfind(b"\n") + 1
        if done:
            break
        time.sleep(0.001)
    wall = time.perf_counter() - started
    if process.returncode != 0 or first is None or last is None:
        stderr = process.stderr.read().decode(errors="replace") if process.stderr else ""
        raise SystemExit(f"{command[:3]} failed ({process.returncode}):\n{stderr[-2000:]}")
    steady = (lines - 1) / (last - first) if last > first else float("nan")
    return Run(first - started, wall, lines, steady, started + wall - last)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--video", type=Path, default=REPO / "build" / "demo" / "demo.mp4")
    args = parser.parse_args()
    if not args.video.exists():
        raise SystemExit(f"{args.video} is missing: run `make demo` (or tools/make_demo_video.py) first")
    with tempfile.TemporaryDirectory(prefix="edge-sdk-startup-") as tmp:
        folder = Path(tmp)
        env = {**os.environ, "EDGE_SDK_CACHE_DIR": str(folder / "cache")}
        (folder / "plain.py").write_text(PLAIN_SCRIPT)
        edge_sdk = str(Path(sys.executable).with_name("edge-sdk"))
        variants: dict[str, tuple[list[str], Path]] = {
            "plain OpenCV + ONNX Runtime script": (
                [sys.executable, str(folder / "plain.py"), str(args.video), str(MODEL), str(folder / "plain.jsonl")],
                folder / "plain.jsonl",
            )
        }
        for mode in ("processes", "inline"):
            out = folder / f"{mode}.jsonl"
            pipeline = folder / f"{mode}.yaml"
            pipeline.write_text(PIPELINE.format(model=MODEL, video=args.video.resolve(), out=out, mode=mode))
            variants[f"edge-sdk run, runtime {mode}"] = ([edge_sdk, "run", str(pipeline), "--profile", "x86-cpu"], out)
        for command, out in variants.values():  # warm-up: builds and caches the engine, fills the OS cache
            timed(command, out, env)
        runs: dict[str, list[Run]] = {name: [] for name in variants}
        for _ in range(args.rounds):
            for name, (command, out) in variants.items():
                runs[name].append(timed(command, out, env))
    print(f"300-frame demo video, {os.cpu_count()} cores, engine cached, {args.rounds} rounds, medians")
    print(
        f"{'':38s} {'first result s':>15s} {'wall s':>8s} {'steady FPS':>11s} {'exit s':>7s} {'frames':>7s}  wall vs plain"
    )
    plain_wall = statistics.median(r.wall for r in runs["plain OpenCV + ONNX Runtime script"])
    for name, rounds in runs.items():
        first = statistics.median(r.first_result for r in rounds)
        wall = statistics.median(r.wall for r in rounds)
        fps = statistics.median(r.steady_fps for r in rounds)
        tail = statistics.median(r.exit_after_last for r in rounds)
        print(
            f"{name:38s} {first:15.2f} {wall:8.2f} {fps:11.1f} {tail:7.2f} {rounds[0].frames:7d}  {wall / plain_wall:.2f}x"
        )


if __name__ == "__main__":
    main()
