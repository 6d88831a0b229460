"""Mixed precision: keep the most sensitive layers in float until the INT8 model passes the accuracy gate.

The layers are ranked once (each quantised alone, see sensitivity.py). The search then keeps the top
1, 2, 4, 8, ... in float until the gate passes, and bisects between the last failing and the first
passing count, so it ends with few float layers after O(log n) quantise-and-measure rounds.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edge_sdk.core.errors import EngineBuildError

from .sensitivity import LayerSensitivity, evaluate_model, rank_layers

if TYPE_CHECKING:
    import onnx

    from ..calibration import Int8Settings, TaskSpec
    from .accuracy import AccuracyGate, AccuracyReport
    from .quantizer import CalibratedRanges, Quantizer

log = logging.getLogger(__name__)

Feed = dict[str, np.ndarray]


@dataclass(frozen=True)
class SearchStep:
    """One round of the search: how many layers stayed float, and why the gate said no (empty = passed)."""

    excluded: int
    failures: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"excluded": self.excluded, "passed": not self.failures, "failures": list(self.failures)}


@dataclass(frozen=True)
class MixedPrecisionResult:
    model: onnx.ModelProto
    excluded_nodes: tuple[str, ...]
    report: AccuracyReport
    ranking: tuple[LayerSensitivity, ...] = ()
    steps: tuple[SearchStep, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        """For the manifest: what stayed float, how the search got there, and the final accuracy."""
        return {
            "excluded_nodes": list(self.excluded_nodes),
            "report": self.report.to_dict(),
            "steps": [step.to_dict() for step in self.steps],
            "most_sensitive": [layer.to_dict() for layer in self.ranking[:10]],
        }


def search_mixed_precision(
    model_path: Path,
    ranges: CalibratedRanges,
    settings: Int8Settings,
    held_out: Sequence[Feed],
    reference_outputs: Sequence[Feed],
    task: TaskSpec,
    labels: np.ndarray | None,
    gate: AccuracyGate,
    *,
    quantizer: Quantizer,
    ranking: Sequence[LayerSensitivity] | None = None,
) -> MixedPrecisionResult:
    """The INT8 model with the fewest most-sensitive layers kept in float that passes `gate`.

    Raises EngineBuildError with the last report when even keeping every quantisable layer in float fails.
    """
    if ranking is None:
        ranking = rank_layers(
            model_path, ranges, settings, held_out, reference_outputs, task, labels, quantizer=quantizer
        )
    order = [layer.node for layer in ranking]
    if not order:
        raise EngineBuildError(f"{model_path.name}: no quantisable layer to keep in float; the INT8 gate cannot pass")
    tried: dict[int, tuple[onnx.ModelProto, AccuracyReport, list[str]]] = {}
    steps: list[SearchStep] = []

    def attempt(count: int) -> bool:
        if count not in tried:
            model = quantizer.quantize(model_path, ranges, settings, exclude_nodes=tuple(order[:count]))
            report = evaluate_model(model, held_out, reference_outputs, task, labels, quantizer)
            failures = gate.failures(report)
            tried[count] = (model, report, failures)
            steps.append(SearchStep(count, tuple(failures)))
            log.info(
                "mixed precision: %d of %d layers in float: %s",
                count,
                len(order),
                "passes" if not failures else "; ".join(failures),
            )
        return not tried[count][2]

    failing, passing = 0, None
    count = 1
    while passing is None:
        count = min(count, len(order))
        if attempt(count):
            passing = count
        elif count == len(order):
            _, report, failures = tried[count]
            raise EngineBuildError(
                f"{model_path.name}: the INT8 accuracy gate fails even with all {len(order)} quantisable layers "
                f"in float ({'; '.join(failures)}); report: {report.to_dict()}"
            )
        else:
            failing, count = count, count * 2
    while passing - failing > 1:  # the gate passed at `passing` and failed at `failing`: bisect between
        middle = (failing + passing) // 2
        if attempt(middle):
            passing = middle
        else:
            failing = middle
    model, report, _ = tried[passing]
    return MixedPrecisionResult(model, tuple(order[:passing]), report, tuple(ranking), tuple(steps))
