"""Chaos run: random faults on the real multi-process runtime for N minutes, and stop latency per state.

Usage: python tools/bench/chaos.py [--minutes 10] [--seed S] [--stop-tries 20] [--frames 90]

Each run starts `edge-sdk run` on a file pipeline (a short video looped to --frames frames, two
inference workers, a JSONL sink) and injects one fault drawn from the seed: SIGKILL of a capture,
inference or output stage, SIGINT/SIGTERM to the parent or SIGTERM to the process group, at a
random moment (starting, steady, draining, restarting). The harness is tools/harness/chaos.py,
the same one `make test` runs a short set of. It prints kills survived / runs, hangs, frames lost
or duplicated, leaked processes and /dev/shm entries, kill-to-resumed-output p50/p99, and, with
--stop-tries, SIGTERM-to-exit p50/p99 for each state.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tools.harness.chaos import (  # noqa: E402
    ACTIONS,
    FILE_MOMENTS,
    STOP_TIMEOUT_S,
    Fault,
    Outcome,
    file_pipeline,
    run_with_fault,
)
from tools.make_demo_video import write_demo_video  # noqa: E402

MODEL = REPO / "models" / "ssdlite_mobilenet_v2_person.onnx"


def percentile(values: list[float], q: float) -> float:
    return (
        float(statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1])
        if len(values) > 1
        else (values[0] if values else float("nan"))
    )


def chaos(minutes: float, seed: int, frames: int, folder: Path) -> list[Outcome]:
    rng = random.Random(seed)
    video = folder / "demo.mp4"
    write_demo_video(video, frames=48, size=(320, 240))
    pipeline = file_pipeline(folder, MODEL, video, frames)
    cache = folder / "cache"
    outcomes: list[Outcome] = []
    ends = time.monotonic() + minutes * 60
    while time.monotonic() < ends:
        fault = Fault(rng.choice(ACTIONS), rng.choice(FILE_MOMENTS))
        run_seed = rng.randrange(1 << 30)
        outcome = run_with_fault(pipeline, cache, fault, run_seed)
        problems = outcome.problems(frames)
        outcomes.append(outcome)
        verdict = "ok" if not problems else "; ".join(problems)
        print(f"  run {len(outcomes):3d} seed {run_seed:10d} {fault!s:28s} exit {outcome.returncode}: {verdict}")
    return outcomes


def report(outcomes: list[Outcome], frames: int) -> None:
    kills = [o for o in outcomes if o.fault.action.startswith("kill") and o.acted]
    failed = [o for o in outcomes if o.problems(frames)]
    lost = sum(max(0, frames - len(set(o.rows))) for o in kills if not o.hung)
    duplicated = sum(len(o.rows) - len(set(o.rows)) for o in outcomes)
    resumed = [o.resume_seconds * 1000 for o in kills if o.resume_seconds is not None]
    print(f"runs: {len(outcomes)}, with a problem: {len(failed)}")
    print(f"kills survived / kill runs: {sum(1 for o in kills if not o.problems(frames))} / {len(kills)}")
    print(f"hangs: {sum(o.hung for o in outcomes)}")
    print(f"file frames lost after a kill: {lost}, delivered twice: {duplicated}")
    print(
        f"leaked processes: {sum(len(o.left_processes) for o in outcomes)}, leaked /dev/shm entries: "
        f"{sum(len(o.left_shm) for o in outcomes)}"
    )
    if resumed:
        print(
            f"kill to resumed output: p50 {percentile(resumed, 50):.0f} ms, p99 {percentile(resumed, 99):.0f} ms "
            f"over {len(resumed)} kills"
        )


def stop_latency(tries: int, seed: int, frames: int, folder: Path) -> None:
    video = folder / "demo.mp4"
    if not video.exists():
        write_demo_video(video, frames=48, size=(320, 240))
    pipeline = file_pipeline(folder, MODEL, video, frames)
    rng = random.Random(seed)
    print(f"SIGTERM to the process group -> exit (runtime.stop_timeout_s = {STOP_TIMEOUT_S:.0f} s)")
    for moment in FILE_MOMENTS:
        seconds, problems = [], 0
        for _ in range(tries):
            outcome = run_with_fault(pipeline, folder / "cache", Fault("sigterm-group", moment), rng.randrange(1 << 30))
            problems += bool(outcome.problems(frames))
            if outcome.stop_seconds is not None:
                seconds.append(outcome.stop_seconds * 1000)
        print(
            f"  {moment:10s} p50 {percentile(seconds, 50):6.0f} ms  p99 {percentile(seconds, 99):6.0f} ms  "
            f"max {max(seconds, default=float('nan')):6.0f} ms  ({len(seconds)} stops, {problems} with a problem)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=random.SystemRandom().randrange(1 << 30))
    parser.add_argument("--frames", type=int, default=90)
    parser.add_argument("--stop-tries", type=int, default=0, help="SIGTERM tries per state (0: skip)")
    args = parser.parse_args()
    print(f"chaos seed {args.seed} (replay: --seed {args.seed})")
    with tempfile.TemporaryDirectory(prefix="edge-sdk-chaos-") as tmp:
        folder = Path(tmp)
        if args.minutes > 0:
            report(chaos(args.minutes, args.seed, args.frames, folder), args.frames)
        if args.stop_tries:
            stop_latency(args.stop_tries, args.seed, args.frames, folder)


if __name__ == "__main__":
    main()
