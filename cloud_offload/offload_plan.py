"""A plan: what each mode of one pipeline costs, as measured by `planner.plan_offload`, and what it is
expected to take on any link (through `cost_model`). It is a JSON file (`edge-sdk offload plan
--out`), so the agent can read the costs without measuring again.

A row is one way of computing a frame: `edge`, `cloud` at one JPEG quality, or a split at one cut with
one tensor precision. A refused row stays in the plan with its reason (a tail that computes nothing,
an accuracy the engines' gate would refuse, a head or tail that does not build), so a user sees why a
cut they expected is missing; only kept rows are candidates for the decision.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from edge_sdk.core.errors import ConfigError

from .cost_model import ModeCost, expected_ms

PLAN_VERSION = 1


@dataclass(frozen=True)
class PlanRow:
    mode: str
    """`edge`, `cloud` or `split@<tensor>`."""
    variant: str
    """How the request is encoded: `jpeg q75`, `fp16+zstd`, `int8+zstd`; '' for the edge."""
    cost: ModeCost | None
    """None only for a row refused before it could be measured (its head or tail does not build)."""
    accuracy: Mapping[str, Any] | None = None
    """The AccuracyReport (as a dict) of this row's outputs against the plan's reference."""
    refused: str | None = None
    """Why the planner leaves this row out of the decision; None for a kept row."""
    detail: Mapping[str, Any] = field(default_factory=dict)
    """Facts for people: a split's `after` (the last head node) and `tensors`, `raw_bytes` (fp32)."""

    @property
    def label(self) -> str:
        return f"{self.mode} ({self.variant})" if self.variant else self.mode

    @property
    def kept(self) -> bool:
        return self.refused is None and self.cost is not None

    def expected_ms(self, bandwidth_bps: float, rtt_ms: float, cloud_queue_ms: float = 0.0) -> float | None:
        if self.cost is None:
            return None
        return expected_ms(self.cost, bandwidth_bps, rtt_ms, cloud_queue_ms)

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "variant": self.variant,
            "cost": None if self.cost is None else self.cost.to_dict(),
            "accuracy": None if self.accuracy is None else dict(self.accuracy),
            "refused": self.refused,
            "detail": dict(self.detail),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PlanRow:
        cost = data.get("cost")
        return cls(
            mode=str(data["mode"]),
            variant=str(data.get("variant", "")),
            cost=None if cost is None else ModeCost.from_dict(cost),
            accuracy=data.get("accuracy"),
            refused=data.get("refused"),
            detail=dict(data.get("detail") or {}),
        )


@dataclass(frozen=True)
class OffloadPlan:
    model: str
    """The model file the pipeline runs."""
    model_key: str
    """protocol.model_key: what edge and worker call this model and its preprocessing."""
    edge_profile: str
    cloud_profile: str
    frames: int
    """Frames every figure is the median (times) or mean (bytes) over."""
    threads: int | None
    """Threads per inference the engines ran with (None: the profiles')."""
    reference: str
    """What each row's accuracy is measured against, in words."""
    rows: tuple[PlanRow, ...]
    notes: tuple[str, ...] = ()
    """What a user should know about the plan as a whole (e.g. why there is no split)."""

    @property
    def kept(self) -> list[PlanRow]:
        return [row for row in self.rows if row.kept]

    @property
    def refused(self) -> list[PlanRow]:
        return [row for row in self.rows if not row.kept]

    def row(self, mode: str, variant: str | None = None) -> PlanRow:
        """The first row of `mode` (and `variant`, when given); KeyError when there is none."""
        for row in self.rows:
            if row.mode == mode and (variant is None or row.variant == variant):
                return row
        raise KeyError(f"{mode} {variant or ''}".strip())

    def expected(self, bandwidth_bps: float, rtt_ms: float, cloud_queue_ms: float = 0.0) -> list[tuple[PlanRow, float]]:
        """Each kept row with its expected latency on this link, in the plan's order."""
        return [(row, expected_ms(row.cost, bandwidth_bps, rtt_ms, cloud_queue_ms)) for row in self.kept if row.cost]

    def best(self, bandwidth_bps: float, rtt_ms: float, cloud_queue_ms: float = 0.0) -> PlanRow:
        """The kept row expected fastest on this link (the edge on a tie: it comes first)."""
        expected = self.expected(bandwidth_bps, rtt_ms, cloud_queue_ms)
        if not expected:
            raise ConfigError("the plan has no kept row (not even the edge)")
        return min(expected, key=lambda pair: pair[1])[0]

    def costs(self) -> list[ModeCost]:
        """The kept rows' costs, for the decision (cost_model.best_mode)."""
        return [row.cost for row in self.kept if row.cost is not None]

    def projected(self, edge_factor: float = 1.0, cloud_factor: float = 1.0) -> OffloadPlan:
        """The plan with every edge time multiplied by `edge_factor` and every worker time by
        `cloud_factor`: a projection of what was measured here onto a slower edge or a faster cloud
        (bytes and accuracy stay as measured). It says so in its notes."""
        if edge_factor <= 0 or cloud_factor <= 0:
            raise ConfigError(f"expected factors above 0, got edge {edge_factor:g} and cloud {cloud_factor:g}")
        rows = tuple(
            row
            if row.cost is None
            else replace(
                row,
                cost=replace(
                    row.cost, edge_ms=row.cost.edge_ms * edge_factor, cloud_ms=row.cost.cloud_ms * cloud_factor
                ),
            )
            for row in self.rows
        )
        note = f"projected, not measured: edge times x{edge_factor:g}, cloud times x{cloud_factor:g}"
        return replace(self, rows=rows, notes=(*self.notes, note))

    def to_dict(self) -> dict[str, Any]:
        return {
            "plan_version": PLAN_VERSION,
            "model": self.model,
            "model_key": self.model_key,
            "edge_profile": self.edge_profile,
            "cloud_profile": self.cloud_profile,
            "frames": self.frames,
            "threads": self.threads,
            "reference": self.reference,
            "rows": [row.to_dict() for row in self.rows],
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OffloadPlan:
        version = data.get("plan_version")
        if version != PLAN_VERSION:
            raise ConfigError(f"offload plan: expected plan_version {PLAN_VERSION}, got {version!r}")
        try:
            return cls(
                model=str(data["model"]),
                model_key=str(data["model_key"]),
                edge_profile=str(data["edge_profile"]),
                cloud_profile=str(data["cloud_profile"]),
                frames=int(data["frames"]),
                threads=None if data.get("threads") is None else int(data["threads"]),
                reference=str(data.get("reference", "")),
                rows=tuple(PlanRow.from_dict(row) for row in data["rows"]),
                notes=tuple(str(note) for note in data.get("notes", ())),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"offload plan: not a plan file ({type(exc).__name__}: {exc})") from None

    def save(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: Path) -> OffloadPlan:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ConfigError(f"offload plan {path}: cannot read it ({exc})") from None
        if not isinstance(data, dict):
            raise ConfigError(f"offload plan {path}: expected a JSON object, got {type(data).__name__}")
        return cls.from_dict(data)


def accuracy_cell(report: Mapping[str, Any] | None) -> str:
    """A row's accuracy in a few characters: matched boxes for a detector, top-1 agreement for a
    classifier, the lowest cosine otherwise."""
    if report is None:
        return ""
    if report.get("matched_boxes") is not None:
        text = f"{report.get('matched_count')}/{report.get('reference_boxes')} boxes"
        extra = report.get("extra_boxes") or 0
        return text + (f", {extra} extra" if extra else "")
    if report.get("top1_agreement") is not None:
        return f"top-1 {report['top1_agreement']:.0%}"
    outputs: Sequence[Mapping[str, Any]] = report.get("outputs") or ()
    if outputs:
        return f"cos {min(float(output['cosine']) for output in outputs):.4f}"
    return ""
