"""Build: ONNX model -> ONNX Runtime's optimised graph, saved once so a cached start skips optimisation."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edge_sdk.errors import ConfigError, EngineBuildError
from edge_sdk.precision import Precision

from ..backend import BuildFacts, EngineBuilder
from ..model_file import ModelFile
from .library import import_onnxruntime
from .options import OnnxRuntimeOptions
from .session import check_providers, provider_list, session_options

if TYPE_CHECKING:
    from ..calibration.settings import Calibration

OPTIMIZED_MODEL = "model.optimized.onnx"
INT8_MODEL = "model.int8.onnx"
"""The quantised (QDQ) model that passed the accuracy gate; ONNX Runtime optimises it into OPTIMIZED_MODEL."""
SESSION_FILE = "session.json"


class OnnxRuntimeBuilder(EngineBuilder):
    def version(self) -> str:
        return str(import_onnxruntime().__version__)

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
        ort = import_onnxruntime()
        source, int8_facts = model.path, None
        if precision == "int8":
            if calibration is None:
                raise ConfigError("precision int8 needs calibration data (edge-sdk build --calib DATA)")
            from .int8 import build_int8_model

            source = out_dir / INT8_MODEL
            int8_facts = build_int8_model(model, calibration, options, source)
        so = session_options(options, options.graph_optimization)
        so.optimized_model_filepath = str(out_dir / OPTIMIZED_MODEL)
        providers = provider_list(options, precision, out_dir)
        started = time.perf_counter()
        try:
            session = ort.InferenceSession(str(source), so, providers=providers)
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
            **({"int8": int8_facts} if int8_facts is not None else {}),
        }


def _node_count(path: Path) -> int:
    import onnx

    return len(onnx.load(str(path), load_external_data=False).graph.node)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
