"""The INT8 build on ONNX Runtime: calibrate, quantise, check against FP32 on held-out data, then keep or refuse.

On a failed accuracy gate the build stops with a report, or (fallback: mixed) asks the mixed-precision
search which layers to keep in float until the gate passes.
"""

from __future__ import annotations

import logging
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx

from edge_sdk.core.errors import EdgeSDKError, EngineBuildError
from edge_sdk.core.model_file import ModelFile
from edge_sdk.core.precision import Precision

from ..calibration.reader import SampleSet
from ..calibration.settings import Calibration
from ..int8.accuracy import AccuracyGate, AccuracyReport, compare_outputs, run_samples
from ..int8.mixed_precision import MixedPrecisionStopped, search_mixed_precision
from ..int8.range_check import range_warnings
from ..int8.recipe import default_float_nodes
from .options import OnnxRuntimeOptions
from .quantize import (
    calibrate,
    count_int8_nodes,
    prepare_for_quantization,
    quantizable_nodes,
    quantize_with_ranges,
    resolve_reduce_range,
)
from .quantizer import OnnxRuntimeQuantizer
from .session import open_session, provider_list, session_options

log = logging.getLogger(__name__)

NAMES = ("FP32", "INT8")


@dataclass(frozen=True)
class Int8Result:
    model: onnx.ModelProto
    excluded_nodes: tuple[str, ...]
    report: AccuracyReport
    search: dict[str, Any] | None = None
    """How the mixed-precision search got there (steps, most sensitive layers), when it ran."""


def build_int8_model(
    model: ModelFile, calibration: Calibration, options: OnnxRuntimeOptions, out_path: Path
) -> dict[str, Any]:
    """Write the quantised model that passed the gate to `out_path`; return the facts for the manifest."""
    settings = calibration.settings
    started = time.perf_counter()
    samples = SampleSet.from_reader(calibration.reader, model.inputs, settings.max_samples)
    calibration_set, held_out = samples.split(settings.holdout_every)
    read_seconds = time.perf_counter() - started
    gate = AccuracyGate.from_settings(settings)
    log.info(
        "int8: calibrating (%s) on %d samples of %s, checking accuracy on %d held out",
        settings.method,
        len(calibration_set),
        calibration.reader.description,
        len(held_out),
    )
    with tempfile.TemporaryDirectory(prefix="edge-sdk-int8-") as tmp:
        workdir = Path(tmp)
        prepared = prepare_for_quantization(model.path, workdir / "model.prepared.onnx")
        candidates = len(quantizable_nodes(prepared))
        started = time.perf_counter()
        ranges = calibrate(prepared, calibration_set, settings)
        calibrate_seconds = time.perf_counter() - started
        warnings = range_warnings(prepared, ranges, calibration_set, OnnxRuntimeQuantizer())
        for warning in warnings:
            log.warning("int8 range check: %s (%s): %s", warning.tensor, warning.kind, warning.detail)
        reference = run_samples(_session(model.path, options, "fp32", workdir), held_out)
        keep_float = default_float_nodes(onnx.load(str(prepared)), settings, calibration.task)
        if keep_float:
            log.info("int8: %d nodes of the detector's stem and post-processing stay in float", len(keep_float))
        quantized = quantize_with_ranges(prepared, ranges, settings, exclude_nodes=keep_float)
        report = compare_outputs(
            reference, _run(quantized, options, workdir, held_out), calibration.task, held_out.labels
        )
        log.info("int8 vs fp32 on held-out data: %s", report.summary(NAMES))
        result = Int8Result(quantized, tuple(keep_float), report)
        failures = gate.failures(report, names=NAMES)
        stopped = None
        if failures and settings.fallback == "mixed":
            try:
                result = _mixed_precision(prepared, ranges, calibration, held_out, reference, gate, report, keep_float)
                failures = gate.failures(result.report, names=NAMES)
            except MixedPrecisionStopped as exc:
                stopped = exc.reason
        if failures:
            raise EngineBuildError(_failure_paragraph(calibration, held_out, result, failures, stopped))
        onnx.save(result.model, str(out_path))
    return {
        "method": settings.method,
        **({"percentile": settings.percentile} if settings.method == "percentile" else {}),
        "format": "QDQ",
        "per_channel": settings.per_channel,
        "activation_type": settings.activation_type,
        "weight_type": settings.weight_type,
        "activation_symmetric": settings.activation_symmetric,
        "reduce_range": resolve_reduce_range(settings),
        "calibration_data": calibration.reader.description,
        "task": calibration.task.kind,
        "samples": {"calibration": len(calibration_set), "held_out": len(held_out)},
        "quantizable_nodes": candidates,
        "int8_nodes": count_int8_nodes(result.model),
        "excluded_nodes": list(result.excluded_nodes),
        "keep_float": settings.keep_float,
        "recipe_float_nodes": len(keep_float),
        "fallback": settings.fallback,
        "gate": {"max_accuracy_drop": settings.max_accuracy_drop, "min_cosine": settings.min_cosine},
        "accuracy": result.report.to_dict(),
        "range_warnings": [warning.to_dict() for warning in warnings],
        **({"mixed_precision": result.search} if result.search is not None else {}),
        "read_seconds": round(read_seconds, 3),
        "calibrate_seconds": round(calibrate_seconds, 3),
    }


def _mixed_precision(
    prepared: Path,
    ranges: Any,
    calibration: Calibration,
    held_out: SampleSet,
    reference: list[dict[str, Any]],
    gate: AccuracyGate,
    full_int8: AccuracyReport,
    keep_float: list[str],
) -> Int8Result:

    log.info("int8 gate failed; searching for layers to keep in float")
    found = search_mixed_precision(
        prepared,
        ranges,
        calibration.settings,
        held_out.samples,
        reference,
        calibration.task,
        held_out.labels,
        gate,
        quantizer=OnnxRuntimeQuantizer(),
        full_int8=full_int8,
        keep_float=keep_float,
    )
    search = found.to_dict() if hasattr(found, "to_dict") else None
    return Int8Result(found.model, (*keep_float, *found.excluded_nodes), found.report, search)


def _failure_paragraph(
    calibration: Calibration, held_out: SampleSet, result: Int8Result, failures: list[str], stopped: str | None
) -> str:
    searched = stopped is not None or result.search is not None
    kept = f" even with {len(result.excluded_nodes)} nodes kept in float" if result.search is not None else ""
    advice = (
        "loosen the gate (--max-drop, --min-cosine), try another --calib-method or more calibration data"
        if searched
        else "loosen the gate (--max-drop, --min-cosine), try another --calib-method, or let the build keep "
        "the most sensitive layers in float (--fallback mixed)"
    )
    fallback = f" The mixed-precision fallback stopped: {stopped}." if stopped else ""
    return (
        f"the INT8 engine failed the accuracy gate{kept} on {len(held_out)} held-out samples of "
        f"{calibration.reader.description}: {'; '.join(failures)}.{fallback} Measured: "
        f"{result.report.summary(NAMES)}. To build anyway, {advice}."
    )


def _session(model: Path | bytes, options: OnnxRuntimeOptions, precision: Precision, workdir: Path) -> Any:
    so = session_options(options, options.graph_optimization)
    providers = provider_list(options, precision, workdir)
    source = str(model) if isinstance(model, Path) else model
    try:
        return open_session(source, so, providers)
    except EdgeSDKError:
        raise
    except Exception as exc:  # onnxruntime's own exception types
        raise EngineBuildError(f"ONNX Runtime could not load the {precision} model: {str(exc).strip()[:300]}") from None


def _run(
    model: onnx.ModelProto, options: OnnxRuntimeOptions, workdir: Path, samples: SampleSet
) -> list[dict[str, Any]]:
    return run_samples(_session(model.SerializeToString(), options, "int8", workdir), samples)
