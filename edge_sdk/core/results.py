"""The canonical types every step takes and returns: frames, detections, results."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class FrameMeta:
    """Which frame of which source; pixels travel separately."""

    source: str
    index: int
    timestamp: float
    width: int
    height: int


@dataclass(frozen=True)
class Frame:
    """A BGR uint8 HxWx3 image (OpenCV's convention) and where it came from."""

    meta: FrameMeta
    image: np.ndarray


@dataclass(frozen=True)
class Classification:
    class_id: int
    label: str
    score: float


@dataclass(frozen=True)
class Detection:
    """A box in pixel coordinates of the source frame."""

    x1: float
    y1: float
    x2: float
    y2: float
    score: float
    class_id: int
    label: str
    classifications: tuple[Classification, ...] = ()
    """What a secondary (cascade) model said about this box."""

    def __post_init__(self) -> None:
        if not (self.x2 >= self.x1 and self.y2 >= self.y1):
            raise ValueError(f"expected x2 >= x1 and y2 >= y1, got box ({self.x1}, {self.y1}, {self.x2}, {self.y2})")
        if not 0.0 <= self.score <= 1.0:
            raise ValueError(f"expected a score in [0, 1], got {self.score}")


@dataclass(frozen=True)
class Result:
    """What a pipeline produced for one frame."""

    frame: FrameMeta
    detections: tuple[Detection, ...] = ()
    classifications: tuple[Classification, ...] = ()
    timings_ms: dict[str, float] = field(default_factory=dict)
    """Where this frame's time went, in milliseconds, the same fields in both runtimes
    (docs/architecture.md, "One frame"): preprocess (making its engine input), infer (its share of
    the engine call: the call's time / batch), batch (frames in that call), postprocess (the
    post-processor), cascade (0 without one) and total (from the frame in hand, read inline or
    written to its ring, to its result ready for the sinks; waits included)."""
    computed_at: str | None = None
    """Where the model ran, when the pipeline offloads (`cloud_offload`): "edge", "cloud" or
    "split@<tensor>"; None for a pipeline that always runs here."""
    model: str | None = None
    """Which model produced it when the pipeline has a `fallback:` model: "primary" or "fallback"
    (the circuit breaker decides); None for a pipeline without one."""
    update: bool = False
    """A refined result of a frame already delivered (offload's escalation): the same frame, a second time."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.frame.source,
            "frame": self.frame.index,
            "timestamp": round(self.frame.timestamp, 6),
            "width": self.frame.width,
            "height": self.frame.height,
            "detections": [
                {
                    "label": d.label,
                    "class_id": d.class_id,
                    "score": round(d.score, 4),
                    "box": [round(d.x1, 1), round(d.y1, 1), round(d.x2, 1), round(d.y2, 1)],
                    **(
                        {"classifications": [_classification_dict(c) for c in d.classifications]}
                        if d.classifications
                        else {}
                    ),
                }
                for d in self.detections
            ],
            "classifications": [_classification_dict(c) for c in self.classifications],
            # batch counts frames: a float only to sit beside the times, written to JSON as the integer it is.
            "timings_ms": {
                name: round(value) if name == "batch" else round(value, 3) for name, value in self.timings_ms.items()
            },
            **({"computed_at": self.computed_at} if self.computed_at is not None else {}),
            **({"model": self.model} if self.model is not None else {}),
            **({"update": True} if self.update else {}),
        }


def _classification_dict(classification: Classification) -> dict[str, Any]:
    return {"label": classification.label, "class_id": classification.class_id, "score": round(classification.score, 4)}
