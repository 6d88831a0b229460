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
from .box_match import BoxMatch, FrameBoxes, count_boxes, match_boxes

__all__ = ["AccuracyGate", "AccuracyReport", "BoxMatch", "boxes_sentence", "compare_outputs", "match_boxes"]

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
    """Detection: the share (0..1) of the reference's boxes that the candidate also found, `matched_count`
    of `reference_boxes` (see BoxMatch); 1.0 when the reference found none."""
    score_drift: float | None = None
    """Mean absolute score difference of matched boxes."""
    reference_boxes: int | None = None
    """Boxes the reference kept at the decoder's score threshold, over every sample (N)."""
    candidate_boxes: int | None = None
    """Boxes the candidate kept at the same threshold (K)."""
    matched_count: int | None = None
    """Reference boxes the candidate found (M)."""
    extra_boxes: int | None = None
    """Candidate boxes (of K) that no reference box matches (E)."""
    box_match: BoxMatch | None = None
    """The rule the box counts follow."""
    task: str = "generic"

    def to_dict(self) -> dict[str, Any]:
        return {key: _rounded(value) for key, value in asdict(self).items()}

    def summary(self, names: tuple[str, str] = ("reference", "candidate")) -> str:
        """One line: the task metric first, then the worst output; `names` label the two engines."""
        parts = []
        if self.reference_accuracy is not None and self.candidate_accuracy is not None:
            parts.append(f"top-1 accuracy {self.reference_accuracy:.2%} -> {self.candidate_accuracy:.2%}")
        if self.top1_agreement is not None:
            parts.append(f"top-1 agreement {self.top1_agreement:.2%}")
        if self.matched_boxes is not None:
            parts.append(self.boxes_sentence(names) + f"; score drift {self.score_drift or 0.0:.4f}")
        if self.outputs and self.matched_boxes is None:  # detection outputs come in NMS order: cosine means little
            worst = min(self.outputs, key=lambda drift: drift.cosine)
            parts.append(f"lowest cosine {worst.cosine:.4f} ('{worst.name}', max abs error {worst.max_abs_error:.4g})")
        return f"{self.samples} samples: " + "; ".join(parts)

    def boxes_sentence(self, names: tuple[str, str] = ("reference", "candidate")) -> str:
        """The detection metric in words (see `boxes_sentence`)."""
        return boxes_sentence(self.to_dict(), names)

    @property
    def extra_share(self) -> float:
        """The share (0..1) of the candidate's boxes that the reference does not have."""
        return (self.extra_boxes or 0) / self.candidate_boxes if self.candidate_boxes else 0.0


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
                    f"matched boxes {report.matched_boxes:.2%}: {cand} found {report.matched_count} of {ref}'s "
                    f"{report.reference_boxes} boxes ({lost:.2f} points lost), {allowed}"
                    + _coarser_than_allowed(report.reference_boxes, self.max_accuracy_drop)
                )
            extra = 100.0 * report.extra_share
            if extra > self.max_accuracy_drop:
                failures.append(
                    f"{report.extra_boxes} of {cand}'s {report.candidate_boxes} boxes are not in {ref} "
                    f"({extra:.2f} points), {allowed}"
                )
        if report.task != "detection":  # NMS output order makes raw detection tensors incomparable
            for drift in report.outputs:
                if drift.cosine < self.min_cosine:
                    failures.append(
                        f"output '{drift.name}' cosine similarity {drift.cosine:.6f} ({cand} vs {ref}), allowed "
                        f"minimum {self.min_cosine:g}"
                    )
        return failures


def _coarser_than_allowed(boxes: int | None, max_drop: float) -> str:
    """Why a gate may fail on one box: with N reference boxes one box is 100/N points, and when that is
    more than the allowed drop the gate only passes a candidate that loses none."""
    if not boxes or 100.0 / boxes <= max_drop:
        return ""
    return (
        f" (with {boxes} reference boxes one box is {100.0 / boxes:.2f} points, more than the allowed drop: "
        f"hold out more data, e.g. a longer video, for a gate that can resolve a {max_drop:g}-point drop)"
    )


def boxes_sentence(report: Mapping[str, Any], names: tuple[str, str] = ("reference", "candidate")) -> str:
    """The detection metric in words, the one way build, compare, sensitivity and the docs say it, from
    a report (or its dict in a manifest): 'matched boxes 96.30%: of FP32's 54 boxes, INT8 found 52
    (IoU >= 0.5, same class, score >= 0.45); INT8 had 36 boxes at score >= 0.5, 0 of them not in FP32'."""
    ref, cand = names
    match = report.get("box_match") or BoxMatch().to_dict()
    return (
        f"matched boxes {report.get('matched_boxes') or 0.0:.2%}: of {ref}'s {report.get('reference_boxes')} "
        f"boxes, {cand} found {report.get('matched_count')} (IoU >= {match['iou_threshold']:g}, same class, "
        f"score >= {match['lenient_threshold']:g}); {cand} had {report.get('candidate_boxes')} boxes at score >= "
        f"{match['score_threshold']:g}, {report.get('extra_boxes')} of them not in {ref}"
    )


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
    """The box counts of BoxMatch: each engine's boxes at the decoder's threshold, each matched against
    the other's decoded `score_margin` under it."""

    assert task.postprocess is not None  # TaskSpec validates this
    spec: Any = task.postprocess
    lenient_threshold = max(spec.score_threshold - task.score_margin, 1e-3)
    lenient_spec = spec.model_copy(update={"score_threshold": lenient_threshold})
    decode, lenient = build_postprocessor(spec), build_postprocessor(lenient_spec)
    geometry = InputGeometry.identity(_DECODE_SIZE, _DECODE_SIZE)
    frames = []
    for index, (ref, cand) in enumerate(zip(reference, candidate, strict=True)):
        frame = FrameMeta("accuracy", index, 0.0, _DECODE_SIZE, _DECODE_SIZE)
        ref_outputs, cand_outputs = {k: v[0] for k, v in ref.items()}, {k: v[0] for k, v in cand.items()}
        frames.append(
            FrameBoxes(
                decode(ref_outputs, frame, geometry).detections,
                lenient(ref_outputs, frame, geometry).detections,
                decode(cand_outputs, frame, geometry).detections,
                lenient(cand_outputs, frame, geometry).detections,
            )
        )
    rule = BoxMatch(task.iou_threshold, spec.score_threshold, round(lenient_threshold, 6))
    counts = count_boxes(frames, rule)
    return _replace(
        report,
        {
            "matched_boxes": counts.matched_share,
            "score_drift": counts.score_drift,
            "reference_boxes": counts.reference,
            "candidate_boxes": counts.candidate,
            "matched_count": counts.matched,
            "extra_boxes": counts.extra,
            "box_match": rule,
        },
    )


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
