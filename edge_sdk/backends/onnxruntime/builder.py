"""Build: ONNX model -> ONNX Runtime's optimised graph, saved once so a cached start skips optimisation."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edge_sdk.core.errors import ConfigError, EdgeSDKError, EngineBuildError, first_line
from edge_sdk.core.model_file import ModelFile
from edge_sdk.core.precision import Precision

from ..backend import BuildFacts, EngineBuilder
from .library import import_onnxruntime
from .options import OnnxRuntimeOptions
from .session import GRAPH_FP16_PROVIDERS, check_providers, open_session, provider_list, session_options

if TYPE_CHECKING:
    from ..calibration.settings import Calibration

OPTIMIZED_MODEL = "model.optimized.onnx"
INT8_MODEL = "model.int8.onnx"
"""The quantised (QDQ) model that passed the accuracy gate; ONNX Runtime optimises it into OPTIMIZED_MODEL."""
SESSION_FILE = "session.json"
FP16_MODEL = "model.fp16.onnx"
"""The graph converted to float16 (fp16.py) for a first provider without an fp16 option (CUDA)."""
BUILD_FORMAT = 2
"""Bumped when the builder writes a different engine for the same key (2: fp16 graphs for CUDA), so
cached engines rebuild: it is part of version(), which the cache key holds."""


class OnnxRuntimeBuilder(EngineBuilder):
    def version(self) -> str:
        return f"{import_onnxruntime().__version__}+sdk{BUILD_FORMAT}"

    def check(self, options: OnnxRuntimeOptions, precision: Precision) -> None:
        check_providers(options, precision)

    def build(
        self,
        model: ModelFile,
        options: OnnxRuntimeOptions,
        precision: Precision,
        out_dir: Path,
        calibration: Calibration | None,
    ) -> BuildFacts:
        source, int8_facts, fp16_facts = model.path, None, None
        if precision == "int8":
            if calibration is None:
                raise ConfigError("precision int8 needs calibration data (edge-sdk build --calib DATA)")
            from .int8 import build_int8_model

            source = out_dir / INT8_MODEL
            int8_facts = build_int8_model(model, calibration, options, source)
        providers = provider_list(options, precision, out_dir)
        if precision == "fp16" and providers and providers[0][0] in GRAPH_FP16_PROVIDERS:
            source = out_dir / FP16_MODEL
            fp16_facts = write_fp16_graph(model.path, source)
        so = session_options(options, options.graph_optimization)
        so.optimized_model_filepath = str(out_dir / OPTIMIZED_MODEL)
        started = time.perf_counter()
        try:
            session = open_session(str(source), so, providers)
        except EdgeSDKError:
            raise
        except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph/RuntimeException types
            raise EngineBuildError(f"ONNX Runtime could not build {model.path.name}: {first_line(exc)}") from None
        seconds = time.perf_counter() - started
        session_facts: dict[str, Any] = {
            "graph_optimization": options.graph_optimization,
            "providers": [name for name, _ in providers],
            "provider_options": {name: opts for name, opts in providers},
        }
        (out_dir / SESSION_FILE).write_text(json.dumps(session_facts, indent=2))
        return {
            "providers_used": session.get_providers(),
            "optimize_seconds": round(seconds, 3),
            "nodes_before": _node_count(model.path),
            "nodes_after": _node_count(out_dir / OPTIMIZED_MODEL),
            **({"int8": int8_facts} if int8_facts is not None else {}),
            **({"fp16": fp16_facts} if fp16_facts is not None else {}),
        }


def write_fp16_graph(source: Path, destination: Path) -> dict[str, Any]:
    """Convert the model at `source` to float16 (fp16.py) into `destination`; the facts of the conversion."""
    import onnx

    from .fp16 import convert_to_fp16

    half, facts = convert_to_fp16(onnx.load(str(source)))
    onnx.save(half, str(destination))
    return facts


def _node_count(path: Path) -> int:
    import onnx

    return len(onnx.load(str(path), load_external_data=False).graph.node)
