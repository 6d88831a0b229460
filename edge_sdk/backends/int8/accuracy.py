"""How far a candidate engine (e.g. INT8) drifts from a reference (e.g. FP32) on the same inputs, and the gate."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from edge_sdk.core.errors import ConfigError
from edge_sdk.core.geometry import InputGeometry
from edge_sdk.core.results import FrameMeta
from edge_sdk.postprocess import build_postprocessor

from ..calibration.settings import Int8Settings, TaskSpec

Outputs = Mapping[str, np.ndarray]

# Detections are decoded as if on a large square frame: IoU does not depend on the scale, and the
# only clipping left is the decoder's own (to the model input for normalised SSD boxes).
_DECODE_SIZE = 4096


@dataclass(frozen=True)
class OutputDrift:
    """One output over every sample: cosine similarity (mean over samples) and absolute errors."""

    name: str
    cosine: float
    max_abs_error: float
    mean_abs_error: float


@dataclass(frozen=True)
class AccuracyReport:
    """What a user would notice: agreement and accuracy (classification), boxes (detection), raw drift."""

    samples: int
    outputs: tuple[OutputDrift, ...]
    top1_agreement: float | None = None
    """Share of samples (0..1) where both engines pick the same top-1 class."""
    reference_accuracy: float | None = None
    """Top-1 accuracy (0..1) of the reference against the labels, when there are labels."""
    candidate_accuracy: float | None = None
    matched_boxes: float | None = None
    """Share (0..1) of both engines' boxes that the other engine also found (same label, IoU >= threshold)."""
    score_drift: float | None = None
    """Mean absolute score difference of matched boxes."""
    reference_boxes: int | None = None
    candidate_boxes: int | None = None
    task: str = "generic"

    def to_dict(self) -> dict[str, Any]:
        return {key: _rounded(value) for key, value in asdict(self).items()}

    def summary(self) -> str:
        """One line: the task metric first, then the worst output."""
        parts = []
        if self.reference_accuracy is not None and self.candidate_accuracy is not None:
            parts.append(f"top-1 accuracy {self.reference_accuracy:.2%} -> {self.candidate_accuracy:.2%}")
        if self.top1_agreement is not None:
            parts.append(f"top-1 agreement {self.top1_agreement:.2%}")
        if self.matched_boxes is not None:
            parts.append(
                f"matched boxes {self.matched_boxes:.2%} ({self.reference_boxes} vs {self.candidate_boxes}), "
                f"score drift {self.score_drift or 0.0:.4f}"
            )
        if self.outputs and self.matched_boxes is None:  # detection outputs come in NMS order: cosine means little
            worst = min(self.outputs, key=lambda drift: drift.cosine)
            parts.append(f"lowest cosine {worst.cosine:.4f} ('{worst.name}', max abs error {worst.max_abs_error:.4g})")
        return f"{self.samples} samples: " + "; ".join(parts)


@dataclass(frozen=True)
class AccuracyGate:
    """How much a candidate may lose: points of the task metric, and a minimum cosine per output."""

    max_accuracy_drop: float
    min_cosine: float

    @classmethod
    def from_settings(cls, settings: Int8Settings) -> AccuracyGate:
        return cls(settings.max_accuracy_drop, settings.min_cosine)

    def failures(self, report: AccuracyReport, names: tuple[str, str] = ("reference", "candidate")) -> list[str]:
        """Each metric over its limit, as 'measured vs allowed'; empty when the report passes.

        `names` label the two engines in the messages, e.g. ("FP32", "INT8").
        """
        ref, cand = names
        failures = []
        allowed = f"allowed {self.max_accuracy_drop:.2f}"
        if report.reference_accuracy is not None and report.candidate_accuracy is not None:
            drop = 100.0 * (report.reference_accuracy - report.candidate_accuracy)
            if drop > self.max_accuracy_drop:
                failures.append(
                    f"top-1 accuracy fell {drop:.2f} points ({report.reference_accuracy:.2%} {ref} -> "
                    f"{report.candidate_accuracy:.2%} {cand}), {allowed}"
                )
        elif report.top1_agreement is not None:
            lost = 100.0 * (1.0 - report.top1_agreement)
            if lost > self.max_accuracy_drop:
                failures.append(
                    f"top-1 agreement of {cand} with {ref} is {report.top1_agreement:.2%} ({lost:.2f} points "
                    f"lost), {allowed}"
                )
        if report.matched_boxes is not None:
            lost = 100.0 * (1.0 - report.matched_boxes)
            if lost > self.max_accuracy_drop:
                failures.append(
                    f"matched boxes {report.matched_boxes:.2%} ({report.reference_boxes} {ref}, "
                    f"{report.candidate_boxes} {cand} boxes; {lost:.2f} points lost), {allowed}"
                )
        if report.task != "detection":  # NMS output order makes raw detection tensors incomparable
            for drift in report.outputs:
                if drift.cosine < self.min_cosine:
                    failures.append(
                        f"output '{drift.name}' cosine similarity {drift.cosine:.6f} ({cand} vs {ref}), allowed "
                        f"minimum {self.min_cosine:g}"
                    )
        return failures


def run_samples(engine: Any, samples: Iterable[Mapping[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """Outputs for each sample, from an EngineRunner (`infer`) or an onnxruntime.InferenceSession (`run`)."""
    if hasattr(engine, "infer"):
        return [engine.infer(dict(sample)) for sample in samples]
    names = [output.name for output in engine.get_outputs()]
    return [dict(zip(names, engine.run(names, dict(sample)), strict=True)) for sample in samples]


def compare_outputs(
    reference: Sequence[Outputs],
    candidate: Sequence[Outputs],
    task: TaskSpec,
    labels: np.ndarray | None = None,
) -> AccuracyReport:
    """Compare two engines' outputs on the same samples (one dict per sample, batch of one)."""
    if len(reference) != len(candidate) or not reference:
        raise ConfigError(
            f"expected the same number (at least one) of reference and candidate results, got "
            f"{len(reference)} and {len(candidate)}"
        )
    names = list(reference[0])
    if set(candidate[0]) != set(names):
        raise ConfigError(f"expected candidate outputs {sorted(names)}, got {sorted(candidate[0])}")
    if labels is not None and len(labels) != len(reference):
        raise ConfigError(f"expected {len(reference)} labels, one per sample, got {len(labels)}")
    drifts = tuple(_drift(name, [r[name] for r in reference], [c[name] for c in candidate]) for name in names)
    report = AccuracyReport(samples=len(reference), outputs=drifts, task=task.kind)
    if task.kind == "classification":
        return _classification(report, reference, candidate, task.output or names[0], labels)
    if task.kind == "detection":
        return _detection(report, reference, candidate, task)
    return report


def _drift(name: str, reference: Sequence[np.ndarray], candidate: Sequence[np.ndarray]) -> OutputDrift:
    cosines, max_abs, abs_sum, count = [], 0.0, 0.0, 0
    for ref, cand in zip(reference, candidate, strict=True):
        a = np.asarray(ref, dtype=np.float64).reshape(-1)
        b = np.asarray(cand, dtype=np.float64).reshape(-1)
        if a.shape != b.shape:
            raise ConfigError(f"output '{name}': expected candidate shape {np.shape(ref)}, got {np.shape(cand)}")
        cosines.append(_cosine(a, b))
        if a.size:
            error = np.abs(a - b)
            max_abs = max(max_abs, float(error.max()))
            abs_sum += float(error.sum())
            count += a.size
    return OutputDrift(name, float(np.mean(cosines)), max_abs, abs_sum / count if count else 0.0)


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    norm_a, norm_b = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if norm_a == 0.0 or norm_b == 0.0:
        return 1.0 if norm_a == norm_b else 0.0
    return float(np.clip(np.dot(a, b) / (norm_a * norm_b), -1.0, 1.0))


def _classification(
    report: AccuracyReport,
    reference: Sequence[Outputs],
    candidate: Sequence[Outputs],
    output: str,
    labels: np.ndarray | None,
) -> AccuracyReport:
    if output not in reference[0]:
        raise ConfigError(f"task output: the model has no output '{output}'; it has {sorted(reference[0])}")
    ref_top = np.array([int(np.argmax(r[output])) for r in reference])
    cand_top = np.array([int(np.argmax(c[output])) for c in candidate])
    updates: dict[str, Any] = {"top1_agreement": float(np.mean(ref_top == cand_top))}
    if labels is not None:
        truth = np.asarray(labels).reshape(-1)
        updates |= {
            "reference_accuracy": float(np.mean(ref_top == truth)),
            "candidate_accuracy": float(np.mean(cand_top == truth)),
        }
    return _replace(report, updates)


def _detection(
    report: AccuracyReport, reference: Sequence[Outputs], candidate: Sequence[Outputs], task: TaskSpec
) -> AccuracyReport:
    """Boxes kept by the decoder in one engine, matched against the other's decoded a little more leniently
    (`score_margin` under the threshold), so a score that merely crosses the threshold is not a lost box."""

    assert task.postprocess is not None  # TaskSpec validates this
    spec: Any = task.postprocess
    lenient_spec = spec.model_copy(update={"score_threshold": max(spec.score_threshold - task.score_margin, 1e-3)})
    decode, lenient = build_postprocessor(spec), build_postprocessor(lenient_spec)
    geometry = InputGeometry.identity(_DECODE_SIZE, _DECODE_SIZE)
    matched = ref_count = cand_count = 0
    drifts: list[float] = []
    for index, (ref, cand) in enumerate(zip(reference, candidate, strict=True)):
        frame = FrameMeta("accuracy", index, 0.0, _DECODE_SIZE, _DECODE_SIZE)
        ref_outputs, cand_outputs = {k: v[0] for k, v in ref.items()}, {k: v[0] for k, v in cand.items()}
        ref_boxes = decode(ref_outputs, frame, geometry).detections
        cand_boxes = decode(cand_outputs, frame, geometry).detections
        ref_count, cand_count = ref_count + len(ref_boxes), cand_count + len(cand_boxes)
        found = lenient(cand_outputs, frame, geometry).detections
        pairs = match_boxes(ref_boxes, found, task.iou_threshold)
        matched += len(pairs) + len(
            match_boxes(cand_boxes, lenient(ref_outputs, frame, geometry).detections, task.iou_threshold)
        )
        drifts += [abs(ref_boxes[i].score - found[j].score) for i, j in pairs]
    total = ref_count + cand_count
    return _replace(
        report,
        {
            "matched_boxes": matched / total if total else 1.0,
            "score_drift": float(np.mean(drifts)) if drifts else 0.0,
            "reference_boxes": ref_count,
            "candidate_boxes": cand_count,
        },
    )


def match_boxes(reference: Sequence[Any], candidate: Sequence[Any], iou_threshold: float) -> list[tuple[int, int]]:
    """Greedy matching, highest reference score first: (reference index, candidate index) pairs of one label."""
    pairs, taken = [], set()
    for i in sorted(range(len(reference)), key=lambda k: -reference[k].score):
        best, best_iou = None, iou_threshold
        for j, box in enumerate(candidate):
            if j in taken or box.class_id != reference[i].class_id:
                continue
            overlap = _iou(reference[i], box)
            if overlap >= best_iou:
                best, best_iou = j, overlap
        if best is not None:
            taken.add(best)
            pairs.append((i, best))
    return pairs


def _iou(a: Any, b: Any) -> float:
    width = min(a.x2, b.x2) - max(a.x1, b.x1)
    height = min(a.y2, b.y2) - max(a.y1, b.y1)
    if width <= 0 or height <= 0:
        return 0.0
    inter = width * height
    union = (a.x2 - a.x1) * (a.y2 - a.y1) + (b.x2 - b.x1) * (b.y2 - b.y1) - inter
    return inter / union if union > 0 else 0.0


def _replace(report: AccuracyReport, updates: dict[str, Any]) -> AccuracyReport:
    return replace(report, **updates)


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, list | tuple):
        return [_rounded(item) for item in value]
    if isinstance(value, dict):
        return {key: _rounded(item) for key, item in value.items()}
    return value
