"""Where `edge-sdk run`'s start-up goes: each phase on the way to the first result, in a fresh process.

Usage: python tools/bench/startup_phases.py [--rounds 5] [--video build/demo/demo.mp4]

Each round is a new interpreter that does what the CLI does, in its order, and times each step:
importing the CLI and the run command, loading the pipeline file and the profile, preparing the
engine (cached: a manifest read), opening an ONNX Runtime session on it, opening the video and
reading its first frame, and one inference. Beside them, in its own fresh process each, what the
stages' fork server imports before it forks (tools/bench/startup.py times the whole process).
Medians of the rounds, in milliseconds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tools.bench.startup import MODEL, PIPELINE  # noqa: E402  (the same pipeline startup.py runs)

PHASES = r"""
import json, sys, time
marks = [("start", time.perf_counter())]
def mark(name): marks.append((name, time.perf_counter()))
import edge_sdk.cli.main
mark("import the CLI")
import edge_sdk.cli.pipeline_commands
mark("import the run command")
from pathlib import Path
from edge_sdk.pipeline.config import load_pipeline
from edge_sdk.profiles.catalog import load_profile
from edge_sdk.engines.cache import EngineCache
config = load_pipeline(Path(sys.argv[1]))
profile = load_profile("x86-cpu")
mark("load the pipeline and the profile")
from edge_sdk.pipeline.engine_setup import prepare_models
models = prepare_models(config, profile, EngineCache(Path(sys.argv[2])))
mark("prepare the engine (cached)")
runner = models.primary.open()
runner.activate()
mark("open an ONNX Runtime session")
from edge_sdk.sources.registry import create_source
source = create_source(config.sources[0], config.base_dir)
source.open()
frame = source.read()
mark("open the video, read a frame")
from edge_sdk.core.preprocess import frame_feed
feed = frame_feed(models.preprocess, models.engine_input)
runner.infer({models.input_name: feed(frame.image)})
mark("first inference")
print(json.dumps([(name, (t - marks[i][1]) * 1000) for i, (name, t) in enumerate(marks[1:])]))
"""

SERVER_IMPORTS = (
    "import time; t = time.perf_counter(); "
    "import edge_sdk.pipeline.stages.capture, edge_sdk.pipeline.stages.inference, "
    "edge_sdk.pipeline.stages.output, onnxruntime; print((time.perf_counter() - t) * 1000)"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--video", type=Path, default=REPO / "build" / "demo" / "demo.mp4")
    args = parser.parse_args()
    if not args.video.exists():
        raise SystemExit(f"{args.video} is missing: run `make demo` (or tools/make_demo_video.py) first")
    with tempfile.TemporaryDirectory(prefix="edge-sdk-phases-") as tmp:
        folder = Path(tmp)
        pipeline = folder / "phases.yaml"
        pipeline.write_text(
            PIPELINE.format(model=MODEL, video=args.video.resolve(), out=folder / "out.jsonl", mode="processes")
        )
        cache = folder / "cache"
        edge_sdk = str(Path(sys.executable).with_name("edge-sdk"))
        env = {**os.environ, "EDGE_SDK_CACHE_DIR": str(cache)}
        subprocess.run(
            [edge_sdk, "run", str(pipeline), "--profile", "x86-cpu"], env=env, check=True, capture_output=True
        )
        runs: dict[str, list[float]] = {}
        for _ in range(args.rounds):
            done = subprocess.run(
                [sys.executable, "-c", PHASES, str(pipeline), str(cache)], env=env, capture_output=True, text=True
            )
            if done.returncode != 0:
                raise SystemExit(done.stderr[-3000:])
            phases = done.stdout
            for name, ms in json.loads(phases.splitlines()[-1]):
                runs.setdefault(name, []).append(ms)
            server = subprocess.run([sys.executable, "-c", SERVER_IMPORTS], check=True, capture_output=True, text=True)
            runs.setdefault("(fork server) its imports, in a process of their own", []).append(float(server.stdout))
    print(f"edge-sdk run's start-up phases, {os.cpu_count()} cores, {args.rounds} rounds, medians (ms)")
    for name, values in runs.items():
        print(f"  {name:55s} {statistics.median(values):8.1f}")


if __name__ == "__main__":
    main()
