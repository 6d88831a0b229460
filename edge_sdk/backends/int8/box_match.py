"""The detection metric: when two engines' boxes count as the same detection, and the counts over a
set of frames. Plain Python over any box with x1, y1, x2, y2, score and class_id (the SDK's
Detection, or a script's own), so tools/bench/int8_detector.py uses it without the SDK's other
dependencies."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol


class Box(Protocol):
    x1: float
    y1: float
    x2: float
    y2: float
    score: float
    class_id: int


@dataclass(frozen=True)
class BoxMatch:
    """When two engines' boxes count as the same detection.

    A reference box (score >= `score_threshold`, the decoder's) is found when a candidate box of the
    same class overlaps it at IoU >= `iou_threshold` and scores at least `lenient_threshold` (the
    threshold less the task's `score_margin`, so a score that merely crosses the threshold is not a
    lost box); each candidate box matches one reference box at most. A candidate box (score >=
    `score_threshold`) is extra when no reference box scoring >= `lenient_threshold` matches it.
    """

    iou_threshold: float = 0.5
    score_threshold: float = 0.5
    lenient_threshold: float = 0.45

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


@dataclass(frozen=True)
class FrameBoxes:
    """One frame's boxes from both engines, each decoded at the threshold and at the lenient threshold."""

    reference: Sequence[Any]
    reference_lenient: Sequence[Any]
    candidate: Sequence[Any]
    candidate_lenient: Sequence[Any]


@dataclass(frozen=True)
class BoxCounts:
    """N, M, K, E of BoxMatch over the frames, and the mean score change of the M matched pairs."""

    reference: int
    matched: int
    candidate: int
    extra: int
    score_drift: float

    @property
    def matched_share(self) -> float:
        """M / N: 1.0 when the reference found no box."""
        return self.matched / self.reference if self.reference else 1.0

    @property
    def extra_share(self) -> float:
        """E / K: 0.0 when the candidate found no box."""
        return self.extra / self.candidate if self.candidate else 0.0


def count_boxes(frames: Sequence[FrameBoxes], rule: BoxMatch) -> BoxCounts:
    """The counts of `rule` over `frames`."""
    reference = matched = candidate = extra = 0
    drifts: list[float] = []
    for frame in frames:
        reference += len(frame.reference)
        candidate += len(frame.candidate)
        pairs = match_boxes(frame.reference, frame.candidate_lenient, rule.iou_threshold)
        matched += len(pairs)
        drifts += [abs(frame.reference[i].score - frame.candidate_lenient[j].score) for i, j in pairs]
        extra += len(frame.candidate) - len(match_boxes(frame.candidate, frame.reference_lenient, rule.iou_threshold))
    return BoxCounts(reference, matched, candidate, extra, sum(drifts) / len(drifts) if drifts else 0.0)


def match_boxes(reference: Sequence[Any], candidate: Sequence[Any], iou_threshold: float) -> list[tuple[int, int]]:
    """Greedy matching, highest reference score first: (reference index, candidate index) pairs of one label."""
    pairs, taken = [], set()
    for i in sorted(range(len(reference)), key=lambda k: -reference[k].score):
        best, best_iou = None, iou_threshold
        for j, box in enumerate(candidate):
            if j in taken or box.class_id != reference[i].class_id:
                continue
            overlap = iou(reference[i], box)
            if overlap >= best_iou:
                best, best_iou = j, overlap
        if best is not None:
            taken.add(best)
            pairs.append((i, best))
    return pairs


def iou(a: Any, b: Any) -> float:
    """Intersection over union of two boxes with x1, y1, x2, y2 (0 when they do not overlap)."""
    width = min(a.x2, b.x2) - max(a.x1, b.x1)
    height = min(a.y2, b.y2) - max(a.y1, b.y1)
    if width <= 0 or height <= 0:
        return 0.0
    inter = width * height
    union = (a.x2 - a.x1) * (a.y2 - a.y1) + (b.x2 - b.x1) * (b.y2 - b.y1) - inter
    return inter / union if union > 0 else 0.0
