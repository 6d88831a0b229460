"""Why engine calls inside governance_batching's serving loop ran far slower on ONNX Runtime's CUDA provider
than the same calls timed alone: times one engine's calls at one batch size, beside a thread that wakes every
half millisecond (as the bench's arrivals thread does), with the batch size changing from call to call, and
with a session per batch size; prints median, p90 and max per case.
  python tools/gpu/serve_stalls.py [--models cnn,detector] [--profile x86-nvidia] [--conv-algo-search S]
                                   [--shape-sessions 1] [--calls 60]
--shape-sessions 1 (the default here) is one session for every shape, as before the profiles' shape_sessions.
Measured on an H100 (docs/benchmarks.md, "Adaptive batching"): a shape change cost 28 ms (cnn) and 2 s
(detector) on every call, a session per size nothing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools" / "bench"))

from governance_batching import OneSession, build_runner, warm_every_size


class Waker:
    """A thread waking every half millisecond, as the bench's arrivals thread does at 2,000 requests/s."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._wake, daemon=True)

    def _wake(self) -> None:
        while not self._stop.is_set():
            time.sleep(0.0005)

    def __enter__(self) -> None:
        self._thread.start()

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()


def timed(run: Callable[[int], None], sizes: list[int], calls: int) -> np.ndarray:
    """ms of each call, the batch size cycling through `sizes`."""
    times = []
    for index in range(calls):
        started = time.perf_counter()
        run(sizes[index % len(sizes)])
        times.append((time.perf_counter() - started) * 1000)
    return np.array(times)


def report(label: str, ms: np.ndarray) -> None:
    print(f"  {label:<34} median {np.median(ms):8.2f} ms  p90 {np.percentile(ms, 90):8.2f}  max {ms.max():8.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="cnn,detector")
    parser.add_argument("--profile", default="x86-nvidia")
    parser.add_argument("--conv-algo-search")
    parser.add_argument("--shape-sessions", type=int, default=1)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--calls", type=int, default=60)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        for model in args.models.split(","):

            def open_engine(model: str = model) -> OneSession:
                runner, sample = build_runner(
                    model, args.profile, Path(folder), args.threads or None, args.conv_algo_search, args.shape_sessions
                )
                return OneSession(runner, sample)

            engine = open_engine()
            print(f"{model}: providers {engine.runner.providers}, feeding {engine.runner.feeding}")
            print(f"  warm 1..8: {warm_every_size(engine, 8):.1f} s")
            for label, sizes, beside in [
                ("alone, batch 1", [1], False),
                ("alone, batch 8", [8], False),
                ("alone, batches 1,3,8", [1, 3, 8], False),
                ("beside a waking thread, batch 1", [1], True),
                ("beside a waking thread, batch 8", [8], True),
                ("beside, batches 1,3,8", [1, 3, 8], True),
                ("alone, batches 1,8", [1, 8], False),
                ("alone again, batch 1", [1], False),
            ]:
                if beside:
                    with Waker():
                        report(label, timed(engine.run, sizes, args.calls))
                else:
                    report(label, timed(engine.run, sizes, args.calls))
            # one session per batch size: does a shape change cost per session, or per process?
            per_size = {1: engine, 8: open_engine()}
            per_size[8].run(8)
            report(
                "a session per size, batches 1,8",
                timed(lambda size, kept=per_size: kept[size].run(size), [1, 8], args.calls),
            )
            for each in per_size.values():
                each.runner.deactivate()


if __name__ == "__main__":
    main()
