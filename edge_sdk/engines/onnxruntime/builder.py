"""Build: ONNX model -> ONNX Runtime's optimised graph, saved once so a cached start skips optimisation."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from edge_sdk.errors import EngineBuildError
from edge_sdk.precision import Precision

from ..backend import BuildFacts, EngineBuilder
from ..model_file import ModelFile
from .library import import_onnxruntime
from .options import OnnxRuntimeOptions
from .session import check_providers, provider_list, session_options

OPTIMIZED_MODEL = "model.optimized.onnx"
SESSION_FILE = "session.json"


class OnnxRuntimeBuilder(EngineBuilder):
    def version(self) -> str:
        return str(import_onnxruntime().__version__)

    def check(self, options: OnnxRuntimeOptions, precision: Precision) -> None:
        check_providers(options, precision)

    def build(self, model: ModelFile, options: OnnxRuntimeOptions, precision: Precision, out_dir: Path) -> BuildFacts:
        ort = import_onnxruntime()
        so = session_options(options, options.graph_optimization)
        so.optimized_model_filepath = str(out_dir / OPTIMIZED_MODEL)
        providers = provider_list(options, precision, out_dir)
        started = time.perf_counter()
        try:
            session = ort.InferenceSession(str(model.path), so, providers=providers)
        except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph/RuntimeException types
            raise EngineBuildError(f"ONNX Runtime could not build {model.path.name}: {_first_line(exc)}") from None
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
        }


def _node_count(path: Path) -> int:
    import onnx

    return len(onnx.load(str(path), load_external_data=False).graph.node)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
