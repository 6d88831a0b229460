"""Issue 13, figure 4: a projection, clearly labelled, of an offload plan measured on the NVIDIA host onto
a Jetson Orin edge, from published Orin figures for ResNet-50 against the same model measured on this edge.

    python tools/bench/orin_projection.py reference --threads 2    # on the edge's cores (taskset), ms per frame
    python tools/bench/orin_projection.py project PLAN.json --reference-ms 31.5

`reference` times a ResNet-50-shaped model (224 px, batch 1, FP32) through the x86-cpu profile's engine,
as MLPerf's ResNet-50 SingleStream runs it; `project` scales every edge time of the plan (an
`edge-sdk offload plan --out` file) by published Orin time / that reference, keeps the worker's times
and every byte as measured, and prints each projected plan's expected latency per bandwidth and the
best mode. One factor per Orin for the whole model: the published figures are whole-model latencies,
so the per-layer profile is scaled uniformly. The GPU rows compare TensorRT INT8 on the Orin with ONNX
Runtime FP32 here (different precision and software: what an Orin's GPU does with the model, not a
like-for-like ratio); the CPU row is ONNX Runtime FP32 on both.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


@dataclass(frozen=True)
class Published:
    edge: str
    resnet50_ms: float
    """ResNet-50 (224 px, batch 1) latency, MLPerf Inference SingleStream 90th percentile."""
    source: str


PUBLISHED = (
    Published(
        "Jetson AGX Orin CPU (12x Cortex-A78AE), ONNX Runtime 1.15.1 FP32",
        37.87,
        "MLPerf Inference v3.1 closed, cTuning's ONNX Runtime reference submission, resnet50 SingleStream "
        "(github.com/mlcommons/inference_results_v3.1, closed/CTuning/results/<Orin system>-reference-cpu-"
        "onnxruntime-v1.15.1-default_config/resnet50/singlestream/performance/run_1/mlperf_log_detail.txt)",
    ),
    Published(
        "Jetson Orin NX 16GB GPU, TensorRT 8.5 INT8",
        1.088,
        "MLPerf Inference v3.0 closed, NVIDIA (github.com/mlcommons/inference_results_v3.0, "
        "closed/NVIDIA/results/Orin_NX_TRT/resnet50/SingleStream/performance/run_1/mlperf_log_summary.txt)",
    ),
    Published(
        "Jetson AGX Orin GPU, TensorRT 8.5 INT8",
        0.633,
        "MLPerf Inference v3.0 closed, NVIDIA (github.com/mlcommons/inference_results_v3.0, "
        "closed/NVIDIA/results/Orin_TRT/resnet50/SingleStream/performance/run_1/mlperf_log_summary.txt)",
    ),
)
XEON_CROSS_CHECK = (
    "the same MLPerf v3.1 cTuning submission (ONNX Runtime 1.15.1 FP32) measured 17.26 ms on 4 cores / 8 threads "
    "of a Xeon Platinum 8481C (GCP c3-standard-8) and 37.34 ms on 2 cores / 4 threads of a Xeon 8259CL (AWS g4dn.xlarge)"
)


def reference(threads: int, runs: int) -> float:
    """Median ms of a ResNet-50-shaped model (224 px, batch 1, FP32) through the x86-cpu profile's engine."""
    import numpy as np

    from edge_sdk import load_profile, prepare_engine
    from edge_sdk.engines.cache import EngineCache
    from tools.harness.onnx_models import resnet50_like

    with tempfile.TemporaryDirectory() as folder:
        model = resnet50_like(Path(folder) / "resnet50.onnx", batch=1, size=224)
        engine = prepare_engine(model, load_profile("x86-cpu"), "fp32", EngineCache(Path(folder) / "engines"))
        image = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
        times = []
        with engine.open(threads=threads) as runner:
            for index in range(runs + 5):
                started = time.perf_counter()
                runner.infer({"images": image})
                if index >= 5:
                    times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def project(plan_path: Path, reference_ms: float, rtt_ms: float, bandwidths: list[float]) -> None:
    from cloud_offload.offload_plan import OffloadPlan

    measured = OffloadPlan.load(plan_path)
    print(f"measured plan: {Path(measured.model).name}, edge {measured.edge_profile}, cloud {measured.cloud_profile}")
    print(f"reference: ResNet-50 (224 px, FP32) on this edge: {reference_ms:.2f} ms; cross-check: {XEON_CROSS_CHECK}")
    header = f"{'mode':44}{'edge ms':>10}" + "".join(f"{f'@{b:g} Mbit/s':>14}" for b in bandwidths)
    for edge in (None, *PUBLISHED):
        factor = 1.0 if edge is None else edge.resnet50_ms / reference_ms
        plan = measured if edge is None else measured.projected(edge_factor=factor)
        title = "MEASURED (the NVIDIA host)" if edge is None else f"PROJECTED, not measured: {edge.edge}"
        print(f"\n{title}: edge times x{factor:.3g}, worker times as measured, RTT {rtt_ms:g} ms")
        if edge is not None:
            print(f"  source: {edge.source}: {edge.resnet50_ms} ms")
        print(header)
        best = {b: plan.best(b * 1e6, rtt_ms) for b in bandwidths}
        for row in plan.kept:
            assert row.cost is not None
            cells = ""
            for b in bandwidths:
                value = f"{row.expected_ms(b * 1e6, rtt_ms) or 0.0:.1f}"
                cells += f"{('*' if best[b] is row else '') + value:>14}"
            print(f"{row.label[:44]:44}{row.cost.edge_ms:>10.1f}{cells}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    timed = commands.add_parser("reference", help="time ResNet-50 (224 px) on this host's edge engine")
    timed.add_argument("--threads", type=int, default=2)
    timed.add_argument("--runs", type=int, default=40)
    projecting = commands.add_parser("project", help="scale a measured plan onto each published Orin")
    projecting.add_argument("plan", type=Path)
    projecting.add_argument("--reference-ms", type=float, required=True)
    projecting.add_argument("--rtt-ms", type=float, default=20.0)
    projecting.add_argument("--bandwidths", default="1,5,20,100")
    args = parser.parse_args()
    if args.command == "reference":
        print(f"resnet50_224_ms {reference(args.threads, args.runs):.3f}")
    else:
        project(args.plan, args.reference_ms, args.rtt_ms, [float(b) for b in args.bandwidths.split(",")])


if __name__ == "__main__":
    main()
