"""Node count and latency before/after the SDK's graph passes, side by side in one run.

Usage: python tools/bench/graph_passes.py [--runs 50] [--warmup 5] [--width 64]

Models: the ResNet-18-sized CNN (tools/harness/onnx_models.py resnet18_like, float32 [1, 3, 224, 224]) and
the shipped person detector (the astronaut photo, 512x512 RGB). For each, ONNX Runtime (CPU) runs
the original and the optimised graph with its own graph optimisation disabled (what our passes do
alone) and at ORT_ENABLE_ALL (what is left once ONNX Runtime has done its part), at 1 and 2 threads.
Runs alternate between the two graphs so both see the same machine load. Prints a markdown table of
p50 latency; "ORT nodes" is the node count of the graph ONNX Runtime actually runs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from edge_sdk.graph import GraphOptions, optimize_graph  # noqa: E402
from tools.harness.onnx_models import resnet18_like  # noqa: E402

LEVELS = {"disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL, "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}


def session(model: onnx.ModelProto, level: str, threads: int, saved: Path | None = None) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = LEVELS[level]
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # no warning about saving an NCHWc-optimised model for counting
    if saved is not None:
        options.optimized_model_filepath = str(saved)
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def ort_node_count(model: onnx.ModelProto, level: str, scratch: Path) -> int:
    saved = scratch / f"ort_{level}.onnx"
    session(model, level, 1, saved)
    return len(onnx.load(str(saved), load_external_data=False).graph.node)


def paired_p50(
    a: ort.InferenceSession, b: ort.InferenceSession, feeds: dict[str, np.ndarray], runs: int, warmup: int
) -> tuple[float, float]:
    for _ in range(warmup):
        a.run(None, feeds)
        b.run(None, feeds)
    times_a, times_b = [], []
    for _ in range(runs):
        for sess, times in ((a, times_a), (b, times_b)):
            started = time.perf_counter()
            sess.run(None, feeds)
            times.append(time.perf_counter() - started)
    return statistics.median(times_a) * 1000, statistics.median(times_b) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--width", type=int, default=64, help="ResNet width (64 = ResNet-18 size)")
    args = parser.parse_args()
    import cv2

    rows = []
    with tempfile.TemporaryDirectory(prefix="edge-sdk-graph-bench-") as tmp:
        scratch = Path(tmp)
        resnet = onnx.load(str(resnet18_like(scratch / "resnet18.onnx", width=args.width)))
        photo = cv2.imread(str(REPO / "tools" / "assets" / "astronaut.jpg"))
        models = {
            f"ResNet-18-sized CNN (width {args.width})": (
                resnet,
                {"images": np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)},
            ),
            "SSDLite person detector": (
                onnx.load(str(REPO / "models" / "ssdlite_mobilenet_v2_person.onnx")),
                {"image_tensor:0": np.ascontiguousarray(photo[np.newaxis, :, :, ::-1])},
            ),
        }
        for label, (model, feeds) in models.items():
            started = time.perf_counter()
            optimized, reports = optimize_graph(model, GraphOptions())
            pass_seconds = time.perf_counter() - started
            print(f"{label}: passes took {pass_seconds:.2f} s", file=sys.stderr)
            for report in reports:
                print(
                    f"  {report.name}: {report.nodes_before} -> {report.nodes_after} {report.detail}", file=sys.stderr
                )
            for level in LEVELS:
                nodes = (ort_node_count(model, level, scratch), ort_node_count(optimized, level, scratch))
                for threads in (1, 2):
                    before, after = session(model, level, threads), session(optimized, level, threads)
                    p50_before, p50_after = paired_p50(before, after, feeds, args.runs, args.warmup)
                    rows.append((label, level, threads, nodes, p50_before, p50_after))
    print(f"ONNX Runtime {ort.__version__}, CPU, p50 of {args.runs} runs after {args.warmup} warm-up runs\n")
    print(
        "| model | ORT graph opt | threads | ORT nodes before → after | p50 before (ms) | p50 after (ms) | speed-up |"
    )
    print("|---|---|---|---|---|---|---|")
    for label, level, threads, (n_before, n_after), p50_before, p50_after in rows:
        print(
            f"| {label} | {level} | {threads} | {n_before} → {n_after} | {p50_before:.2f} | {p50_after:.2f} "
            f"| {p50_before / p50_after:.2f}x |"
        )


if __name__ == "__main__":
    main()
