"""On the NVIDIA host: does the equivalence gate catch what it is for, on the real CUDA EP?

1. The demo engine for x86-nvidia as shipped (float NCHW fold): the gate's verdict and its cost.
2. The same build forced into the uint8 NHWC fold that gave 0 detections on CUDA (issue 10): the
   gate must fail the fold, fall back to host preprocessing with one warning, and pass unfolded.
3. Bad input: a CUDA device id that does not exist, and an fp16 build asked of a CPU-only profile:
   one line each, and the cache keeps exactly what it held.

Usage (PYTHONPATH with onnxruntime-gpu): python tools/gpu/gate_check.py [--cache DIR]
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

import yaml

from edge_sdk.engines import engine as engine_module
from edge_sdk.engines.cache import EngineCache
from edge_sdk.engines.engine import prepare_engine
from edge_sdk.engines.model_file import ModelFile
from edge_sdk.errors import EdgeSDKError
from edge_sdk.pipeline.config import load_pipeline
from edge_sdk.pipeline.models import pipeline_gate, pipeline_graph, pipeline_input
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

        print("3. bad input (one line each, cache unchanged):")
        before = sorted(report.digest for report in cache.entries())
        profiles = Path(scratch) / "profiles"
        profiles.mkdir()
        document = yaml.safe_load((REPO / "device_profiles" / "x86-nvidia.yaml").read_text())
        document["name"] = "x86-nvidia-gpu7"
        for provider in document["engine"]["execution_providers"]:
            if "device_id" in provider:
                provider["device_id"] = 7
        (profiles / "x86-nvidia-gpu7.yaml").write_text(yaml.safe_dump(document))
        wrong_gpu = ProfileCatalog(profiles).load("x86-nvidia-gpu7")
        for label, attempt in (
            ("device_id 7 on a one-GPU host", lambda: prepare_engine(model, wrong_gpu, cache=cache, **options)),
            ("fp16 on x86-cpu", lambda: prepare_engine(model, catalog.load("x86-cpu"), "fp16", cache=cache)),
        ):
            try:
                attempt()
                print(f"   {label}: NOT refused")
            except EdgeSDKError as exc:
                lines = str(exc).splitlines()
                print(f"   {label}: {type(exc).__name__} ({len(lines)} line): {lines[0][:300]}")
        after = sorted(report.digest for report in cache.entries())
        print(f"   cache unchanged: {before == after} ({len(after)} entries, {len(cache.not_entries())} other files)")
        print("   (device_id 7: before the fix, ONNX Runtime printed an EP Error dump and built the engine on the CPU)")


if __name__ == "__main__":
    main()
