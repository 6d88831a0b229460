"""On the NVIDIA host: does the equivalence gate catch what it is for, on the real CUDA EP?

1. The demo engine for x86-nvidia as shipped (float NCHW fold): the gate's verdict and its cost.
2. The same build forced into the uint8 NHWC fold that gave 0 detections on CUDA (issue 10): the
   gate must fail the fold, fall back to host preprocessing with one warning, and pass unfolded.
(A CUDA device id the host lacks is tests/backends/test_provider_refusal.py's gpu-marked test.)

Usage (PYTHONPATH with onnxruntime-gpu): python tools/gpu/gate_check.py [--cache DIR]
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

from edge_sdk.core.model_file import ModelFile
from edge_sdk.engines import engine as engine_module
from edge_sdk.engines.cache import EngineCache
from edge_sdk.engines.engine import prepare_engine
from edge_sdk.pipeline.config import load_pipeline
from edge_sdk.pipeline.engine_setup import pipeline_gate, pipeline_graph, pipeline_input
from edge_sdk.profiles import ProfileCatalog

REPO = Path(__file__).resolve().parents[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="  log %(levelname)s: %(message)s")
    catalog = ProfileCatalog(REPO / "device_profiles")
    gpu = catalog.load("x86-nvidia")
    demo = load_pipeline(REPO / "pipelines" / "demo.yaml")
    model = ModelFile.load(demo.model.path)
    options = {"graph": pipeline_graph(demo, model), "gate": pipeline_gate(demo, pipeline_input(demo, model))}
    with tempfile.TemporaryDirectory() as scratch:
        cache = EngineCache(args.cache or Path(scratch) / "cache")
        print("1. demo engine on x86-nvidia (fp16, the shipped float NCHW fold):")
        started = time.perf_counter()
        shipped = prepare_engine(model, gpu, cache=cache, **options)
        print(f"   built in {time.perf_counter() - started:.2f} s, folded {shipped.folded}")
        print(f"   {shipped.gate.line() if shipped.gate else 'no gate verdict'}")

        print("2. the same build forced into the uint8 NHWC fold (the CUDA defect):")
        real = engine_module.exact_uint8_resize
        engine_module.exact_uint8_resize = lambda profile: True
        try:
            scratch_cache = EngineCache(Path(scratch) / "forced")
            forced = prepare_engine(model, gpu, cache=scratch_cache, **options)
        finally:
            engine_module.exact_uint8_resize = real
        gate = forced.gate
        print(f"   folded {forced.folded}; {gate.line() if gate else 'no gate verdict'}")
        print(f"   the folded form's verdict: {gate.fold_fallback if gate else None}")
        print(f"   CAUGHT: {'yes' if gate and gate.fold_fallback and not forced.folded else 'NO'}")


if __name__ == "__main__":
    main()
