"""Per-layer INT8 sensitivity: quantise one layer alone, measure what the model loses against FP32.

Ranges are calibrated once; each candidate layer then costs one quantisation pass, one CPU session
and one run over the held-out samples (all through the backend's `Quantizer` hook), so a detector of ~90 convolutions takes a minute or two.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edge_sdk.core.errors import ConfigError
from edge_sdk.core.progress import report as report_progress

from .accuracy import AccuracyReport, compare_outputs, run_samples
from .range_check import range_warnings

if TYPE_CHECKING:
    import onnx

    from ..calibration import Int8Settings, SampleSet, TaskSpec
    from .quantizer import CalibratedRanges, Quantizer
    from .range_check import RangeWarning

log = logging.getLogger(__name__)

Feed = dict[str, np.ndarray]
Progress = Callable[[int, int, str], None]
"""Called as (done, total, node) after each layer."""


@dataclass(frozen=True)
class LayerSensitivity:
    """What quantising `node` alone costs: `metric_drop` in the units of `metric` (higher = worse)."""

    node: str
    op_type: str
    metric_drop: float
    cosine: float
    """The lowest cosine similarity with FP32 over the model's outputs."""
    metric: str
    score_drift: float | None = None
    """Detection only: mean score change of the boxes that still match (raw detection outputs, sorted by
    NMS, make the cosine meaningless there)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "op_type": self.op_type,
            "metric_drop": round(self.metric_drop, 6),
            "cosine": round(self.cosine, 6),
            "score_drift": None if self.score_drift is None else round(self.score_drift, 6),
            "metric": self.metric,
        }


def drop_metric(report: AccuracyReport, task: TaskSpec) -> tuple[float, str]:
    """One number for 'how much worse' and its name, chosen by what the report can measure.

    Classification with labels: accuracy points lost; without labels: top-1 disagreement in points;
    detection: the worse of the reference's boxes lost and the candidate's extra boxes, in points (the two
    shares the gate limits); anything else: 1 - the lowest output cosine.
    """
    if task.kind == "classification":
        if report.reference_accuracy is not None and report.candidate_accuracy is not None:
            return _points(report.reference_accuracy - report.candidate_accuracy), "accuracy drop (points)"
        if report.top1_agreement is not None:
            return _points(1.0 - report.top1_agreement), "top-1 disagreement (points)"
    if task.kind == "detection" and report.matched_boxes is not None:
        return _points(max(1.0 - report.matched_boxes, report.extra_share)), "unmatched boxes (points)"
    return 1.0 - lowest_cosine(report), "1 - cosine"


def drop_metric_name(task: TaskSpec, labels: np.ndarray | None) -> str:
    """The name `drop_metric` gives its number for this task, known before any report."""
    if task.kind == "classification":
        return "accuracy drop (points)" if labels is not None else "top-1 disagreement (points)"
    return "unmatched boxes (points)" if task.kind == "detection" else "1 - cosine"


def lowest_cosine(report: AccuracyReport) -> float:
    return min((drift.cosine for drift in report.outputs), default=1.0)


def _points(fraction: float) -> float:
    return round(100.0 * fraction, 6)


def rank_layers(
    model_path: Path,
    ranges: CalibratedRanges,
    settings: Int8Settings,
    held_out: Sequence[Feed],
    reference_outputs: Sequence[Feed],
    task: TaskSpec,
    labels: np.ndarray | None = None,
    *,
    quantizer: Quantizer,
    nodes: Sequence[str] | None = None,
    progress: Progress | None = None,
) -> list[LayerSensitivity]:
    """Sensitivity of each node that quantises on its own (or of `nodes`), most sensitive first."""
    import onnx

    if len(held_out) != len(reference_outputs):
        raise ConfigError(
            f"expected one reference output per held-out sample, got {len(reference_outputs)} for {len(held_out)}"
        )
    if not held_out:
        raise ConfigError("expected held-out samples to measure sensitivity on, got none")
    model = onnx.load(str(model_path))
    op_types = {node.name: node.op_type for node in model.graph.node}
    candidates = list(nodes) if nodes is not None else standalone_nodes(model, quantizer)
    unknown = [name for name in candidates if name not in op_types]
    if unknown:
        raise ConfigError(f"expected nodes of {model_path.name}, got unknown names {unknown[:5]}")
    scored = []
    report_progress("sensitivity", 0, len(candidates))
    for index, node in enumerate(candidates, start=1):
        quantized = quantizer.quantize(model_path, ranges, settings, only_nodes=[node])
        if _has_quantization(quantized):
            report = evaluate_model(quantized, held_out, reference_outputs, task, labels, quantizer)
            drop, metric = drop_metric(report, task)
            layer = LayerSensitivity(node, op_types[node], drop, lowest_cosine(report), metric, report.score_drift)
            scored.append((layer, _tiebreak(report)))
        else:  # e.g. a ReLU whose input is float: nothing to measure
            unchanged = 0.0 if task.kind == "detection" else None
            layer = LayerSensitivity(node, op_types[node], 0.0, 1.0, drop_metric_name(task, labels), unchanged)
            scored.append((layer, 0.0))
        log.debug("sensitivity %s: %s %.4f, cosine %.6f", node, layer.metric, layer.metric_drop, layer.cosine)
        report_progress("sensitivity", index, len(candidates), finished=index == len(candidates))
        if progress is not None:
            progress(index, len(candidates), node)
    scored.sort(key=lambda pair: (-pair[0].metric_drop, -pair[1]))
    return [layer for layer, _ in scored]


def standalone_nodes(model: onnx.ModelProto, quantizer: Quantizer) -> list[str]:
    """Quantisable nodes that quantise their own inputs, in graph order.

    Pass-through ops (ReLU, Clip, Reshape, Transpose, MaxPool, Resize, ...) are in 8 bits only when their
    input already is: alone they change nothing, and with a neighbour they follow it. So they are neither
    ranked nor excluded on their own.
    """
    pass_through = quantizer.pass_through_op_types()
    op_types = {node.name: node.op_type for node in model.graph.node}
    return [name for name in quantizer.quantizable_nodes(model) if op_types.get(name) not in pass_through]


def _has_quantization(model: onnx.ModelProto) -> bool:
    return any(node.op_type in ("QuantizeLinear", "DequantizeLinear") for node in model.graph.node)


def _tiebreak(report: AccuracyReport) -> float:
    """Orders layers of equal drop (common: a few held-out samples rarely flip a class): detection by
    score drift of matched boxes, anything else by how far the outputs moved (1 - cosine)."""
    if report.task == "detection" and report.score_drift is not None:
        return report.score_drift
    return 1.0 - lowest_cosine(report)


def evaluate_model(
    model: onnx.ModelProto,
    held_out: Sequence[Feed],
    reference_outputs: Sequence[Feed],
    task: TaskSpec,
    labels: np.ndarray | None,
    quantizer: Quantizer,
) -> AccuracyReport:
    """Run an in-memory model on the held-out samples (one optimised CPU session, so QDQ pairs run as
    the int8 kernels a deployed engine uses) and compare it with the reference."""
    session = quantizer.session(model)
    return compare_outputs(reference_outputs, run_samples(session, held_out), task, labels)


@dataclass(frozen=True)
class SensitivityAnalysis:
    """The ranking, what the fully quantised model loses, and the range check of the same calibration."""

    layers: list[LayerSensitivity]
    full_int8: AccuracyReport
    full_int8_drop: float
    metric: str
    range_warnings: list[RangeWarning]
    calibration_samples: int
    held_out_samples: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "calibration_samples": self.calibration_samples,
            "held_out_samples": self.held_out_samples,
            "full_int8": {"metric_drop": self.full_int8_drop, "report": self.full_int8.to_dict()},
            "layers": [layer.to_dict() for layer in self.layers],
            "range_warnings": [warning.to_dict() for warning in self.range_warnings],
        }


def analyse_sensitivity(
    model_path: Path,
    samples: SampleSet,
    settings: Int8Settings,
    task: TaskSpec,
    *,
    quantizer: Quantizer,
    nodes: Sequence[str] | None = None,
    progress: Progress | None = None,
) -> SensitivityAnalysis:
    """Split the samples, calibrate once, rank every layer, measure the fully quantised model, check ranges.

    Layer names are those of the model prepared for quantisation (shape inference, BatchNormalization
    folded, every node named): the names a build's `excluded_nodes` use.
    """

    calibration, held_out = samples.split(settings.holdout_every)
    held_feeds = list(held_out)
    with tempfile.TemporaryDirectory(prefix="edge-sdk-sensitivity-") as tmp:
        prepared = quantizer.prepare(model_path, Path(tmp) / "model.prepared.onnx")
        ranges = quantizer.calibrate(prepared, calibration, settings)
        reference = run_samples(quantizer.session(model_path), held_feeds)
        layers = rank_layers(
            prepared,
            ranges,
            settings,
            held_feeds,
            reference,
            task,
            held_out.labels,
            quantizer=quantizer,
            nodes=nodes,
            progress=progress,
        )
        full_model = quantizer.quantize(prepared, ranges, settings)
        full = evaluate_model(full_model, held_feeds, reference, task, held_out.labels, quantizer)
        warnings = range_warnings(prepared, ranges, calibration, quantizer)
    full_drop, metric = drop_metric(full, task)
    return SensitivityAnalysis(layers, full, full_drop, metric, warnings, len(calibration), len(held_out))


def layer_sensitivity(
    model_path: Path,
    samples: SampleSet,
    settings: Int8Settings,
    task: TaskSpec,
    labels: np.ndarray | None = None,
    *,
    quantizer: Quantizer,
) -> list[LayerSensitivity]:
    """The ranking alone (see `analyse_sensitivity`); `labels` override those the samples carry."""
    if labels is not None:
        samples = replace(samples, labels=np.asarray(labels))
    return analyse_sensitivity(model_path, samples, settings, task, quantizer=quantizer).layers
