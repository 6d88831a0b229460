"""The graph pass protocol, the report of one pass, and the loop that runs a list of them."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import onnx

from .graph_edit import node_count


class GraphPass(Protocol):
    """One rewrite of an ONNX model that keeps its outputs numerically equal.

    `apply` returns a new model and leaves its argument untouched. A pass may also expose a
    `detail: str` attribute, set by `apply`, that says what it changed ("folded 4 BatchNormalization").
    """

    name: str

    def apply(self, model: onnx.ModelProto) -> onnx.ModelProto: ...


@dataclass(frozen=True)
class PassReport:
    name: str
    nodes_before: int
    nodes_after: int
    seconds: float
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_passes(model: onnx.ModelProto, passes: Sequence[GraphPass]) -> tuple[onnx.ModelProto, list[PassReport]]:
    """Apply `passes` in order; one report per pass with node counts, time and what changed."""
    reports = []
    for graph_pass in passes:
        before = node_count(model)
        ops_before = _op_counts(model)
        started = time.perf_counter()
        model = graph_pass.apply(model)
        seconds = time.perf_counter() - started
        detail = getattr(graph_pass, "detail", "") or _op_difference(ops_before, _op_counts(model))
        reports.append(PassReport(graph_pass.name, before, node_count(model), round(seconds, 4), detail))
    return model, reports


def _op_counts(model: onnx.ModelProto) -> Counter[str]:
    return Counter(node.op_type for node in model.graph.node)


def _op_difference(before: Counter[str], after: Counter[str]) -> str:
    """'-4 BatchNormalization, +1 Cast' style summary; empty when nothing changed."""
    changes = []
    for op in sorted(before.keys() | after.keys()):
        delta = after[op] - before[op]
        if delta:
            changes.append(f"{delta:+d} {op}")
    return ", ".join(changes)
