"""What the equivalence gate adds to an engine build: gate seconds beside build seconds, per model and profile.

Usage: python tools/bench/equivalence_gate.py [--profile x86-cpu] [--repeats 3] [--precision fp32]

Each repeat builds into a fresh scratch cache: the demo detector with the demo pipeline (its video's
frames, the preprocessing folded, boxes matched), the same detector with no pipeline (the shipped
image), and the digits classifier (seeded inputs, cosine per output). Prints the build's total
seconds, the gate's own seconds (from the manifest) and its share, p50 over the repeats.
Run `make demo` (or tools/make_demo_video.py build/demo/demo.mp4) first for the demo video.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edge_sdk.core.model_file import ModelFile
from edge_sdk.engines.cache import EngineCache
from edge_sdk.engines.engine import prepare_engine
from edge_sdk.pipeline.config import load_pipeline
from edge_sdk.pipeline.engine_setup import pipeline_gate, pipeline_graph, pipeline_input
from edge_sdk.profiles import ProfileCatalog

REPO = Path(__file__).resolve().parents[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="x86-cpu")
    parser.add_argument("--precision", default=None)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    profile = ProfileCatalog(REPO / "device_profiles").load(args.profile)
    demo = load_pipeline(REPO / "pipelines" / "demo.yaml")
    detector = ModelFile.load(demo.model.path)
    digits = ModelFile.load(REPO / "models" / "digits_cnn.onnx")
    cases: list[tuple[str, ModelFile, Callable[[], dict[str, Any]]]] = [
        (
            "detector, demo pipeline (video frames, folded)",
            detector,
            lambda: {
                "graph": pipeline_graph(demo, detector),
                "gate": pipeline_gate(demo, pipeline_input(demo, detector)),
            },
        ),
        ("detector, no pipeline (shipped image)", detector, dict),
        ("digits classifier (seeded inputs)", digits, dict),
    ]
    print(f"profile {profile.name}, {args.repeats} builds each, p50:")
    print(f"{'case':50} {'build s':>8} {'gate s':>8} {'gate %':>7}  verdict")
    for name, model, options in cases:
        builds, gates, line = [], [], ""
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory() as scratch:
                prepared = prepare_engine(model, profile, args.precision, EngineCache(Path(scratch)), **options())
                assert prepared.gate is not None
                builds.append(prepared.seconds)
                gates.append(prepared.gate.seconds)
                line = f"{'passed' if prepared.gate.passed else 'FAILED'}: {prepared.gate.summary}"
        build, gate = statistics.median(builds), statistics.median(gates)
        print(f"{name:50} {build:8.2f} {gate:8.2f} {100 * gate / build:6.0f}%  {line}", flush=True)


if __name__ == "__main__":
    main()
