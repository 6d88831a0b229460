"""Mixed precision: keep the most sensitive layers in float until the INT8 model passes the accuracy gate.

First one round with every ranked layer in float: when even that fails, no choice of layers can help
and the search stops before ranking them (the ranking is the expensive part). Otherwise the layers are
ranked once (each quantised alone, see sensitivity.py) and the search keeps the top 1, 2, 4, 8, ... in
float until the gate passes, then bisects between the last failing and the first passing count, so it
ends with few float layers after O(log n) quantise-and-measure rounds. It stops early, saying why in
one sentence, when keeping twice as many layers in float twice running did not improve the metric, or
when only all of them would pass (that model is the FP32 one).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edge_sdk.core.errors import EngineBuildError
from edge_sdk.core.progress import report as report_progress

from .sensitivity import LayerSensitivity, drop_metric, evaluate_model, rank_layers, standalone_nodes

if TYPE_CHECKING:
    import onnx

    from ..calibration import Int8Settings, TaskSpec
    from .accuracy import AccuracyGate, AccuracyReport
    from .quantizer import CalibratedRanges, Quantizer

log = logging.getLogger(__name__)

Feed = dict[str, np.ndarray]
PATIENCE = 2
"""Doublings in a row without a better metric after which the search stops."""
TASK = "mixed precision"


class MixedPrecisionStopped(EngineBuildError):
    """The search ended without a passing model; `reason` says why in one sentence."""

    def __init__(self, model_name: str, reason: str, report: AccuracyReport, steps: Sequence[SearchStep]):
        super().__init__(f"{model_name}: the mixed-precision search stopped: {reason}")
        self.reason = reason
        self.report = report
        self.steps = tuple(steps)


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
    full_int8: AccuracyReport | None = None,
    keep_float: Sequence[str] = (),
) -> MixedPrecisionResult:
    """The INT8 model with the fewest most-sensitive layers kept in float that passes `gate`.

    `full_int8` is what the model quantised by the recipe measured (its metric is where the search
    starts); `keep_float` are the nodes the recipe keeps in float (recipe.py), which stay float in every
    round and are not searched.
    Raises MixedPrecisionStopped (an EngineBuildError) with the reason and the last report when no
    INT8 model with fewer than all layers in float passes.
    """
    import onnx

    if ranking is not None:
        candidates = [layer.node for layer in ranking]
    else:
        candidates = standalone_nodes(onnx.load(str(model_path)), quantizer)
    candidates = [node for node in candidates if node not in set(keep_float)]
    if not candidates:
        raise EngineBuildError(f"{model_path.name}: no quantisable layer to keep in float; the INT8 gate cannot pass")
    tried: dict[int, tuple[onnx.ModelProto, AccuracyReport, list[str]]] = {}
    steps: list[SearchStep] = []
    order = list(candidates)
    total = len(order)

    def attempt(count: int) -> bool:
        if count not in tried:
            report_progress(TASK, len(steps), None, f"{count} of {total} layers in float")
            excluded = (*keep_float, *order[:count])
            model = quantizer.quantize(model_path, ranges, settings, exclude_nodes=excluded)
            report = evaluate_model(model, held_out, reference_outputs, task, labels, quantizer)
            failures = gate.failures(report)
            tried[count] = (model, report, failures)
            steps.append(SearchStep(count, tuple(failures)))
            log.info(
                "mixed precision: %d of %d layers in float: %s",
                count,
                total,
                "passes" if not failures else "; ".join(failures),
            )
        return not tried[count][2]

    def stop(reason: str, count: int) -> MixedPrecisionStopped:
        report_progress(TASK, len(steps), len(steps), finished=True)
        measured = tried[count][1] if count in tried else full_int8 or tried[total][1]
        return MixedPrecisionStopped(model_path.name, reason, measured, steps)

    def lost(count: int) -> float:
        return drop_metric(tried[count][1], task)[0]

    if not attempt(total):
        raise stop(
            f"even with all {total} quantisable layers in float the gate fails ({'; '.join(tried[total][2])}), "
            "so no choice of layers to keep in float can pass; the layers were not ranked",
            total,
        )
    if ranking is None:
        ranking = rank_layers(
            model_path,
            ranges,
            settings,
            held_out,
            reference_outputs,
            task,
            labels,
            quantizer=quantizer,
            nodes=candidates,
        )
        order = [layer.node for layer in ranking]  # tried[total] stays right: all of them, in any order
    best = drop_metric(full_int8, task)[0] if full_int8 is not None else float("inf")
    best_count, stalled = 0, 0
    failing, passing = 0, None
    count = 1
    while passing is None:
        if count >= total:  # all of them in float passed (the first attempt): bisect below it
            passing = total
            break
        if attempt(count):
            passing = count
            break
        if lost(count) < best:
            best, best_count, stalled = lost(count), count, 0
        else:
            stalled += 1
            if stalled >= PATIENCE:
                metric = drop_metric(tried[count][1], task)[1]
                raise stop(
                    f"keeping {count} layers in float did not improve the {metric} over keeping {best_count} "
                    f"({lost(count):.2f} against {best:.2f}), so more layers in float are not helping",
                    count,
                )
        failing, count = count, count * 2
    while passing - failing > 1:  # the gate passed at `passing` and failed at `failing`: bisect between
        middle = (failing + passing) // 2
        if attempt(middle):
            passing = middle
        else:
            failing = middle
    if passing == total:
        raise stop(
            f"the gate passes only with all {total} quantisable layers in float, which is the FP32 model "
            "(build --precision fp32 instead)",
            failing,
        )
    report_progress(TASK, len(steps), len(steps), finished=True)
    model, report, _ = tried[passing]
    return MixedPrecisionResult(model, tuple(order[:passing]), report, tuple(ranking), tuple(steps))
