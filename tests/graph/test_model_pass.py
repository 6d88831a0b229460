"""run_passes: one report per pass, in order, with node counts and what changed."""

from __future__ import annotations

from types import SimpleNamespace

import onnx
import pytest

from edge_sdk.graph import BatchNormFolding, NoOpRemoval, PassReport, model_pass, run_passes


class _DropFirstRelu:
    """A pass without a `detail` of its own: the report falls back to the op-count difference."""

    name = "drop_first_relu"

    def apply(self, model: onnx.ModelProto) -> onnx.ModelProto:
        out = onnx.ModelProto()
        out.CopyFrom(model)
        relu = next(n for n in out.graph.node if n.op_type == "Relu")
        for node in out.graph.node:
            node.input[:] = [relu.input[0] if name == relu.output[0] else name for name in node.input]
        out.graph.node.remove(relu)
        return out


def test_run_passes_when_given_two_passes_reports_each_in_order(resnet: onnx.ModelProto) -> None:
    # when
    optimized, reports = run_passes(resnet, [NoOpRemoval(), BatchNormFolding()])
    # then
    nodes = len(resnet.graph.node)
    assert [r.name for r in reports] == ["noop_removal", "batchnorm_folding"]
    assert (reports[0].nodes_before, reports[0].nodes_after) == (nodes, nodes - 2)
    assert (reports[1].nodes_before, reports[1].nodes_after) == (nodes - 2, nodes - 22)
    assert reports[0].detail == "removed 1 Dropout, 1 Identity"
    assert reports[1].detail == "folded 20 BatchNormalization"
    assert len(optimized.graph.node) == nodes - 22


class _TakesTime:
    """A pass that leaves the model alone and moves a fake clock on while it runs."""

    name = "takes_time"

    def __init__(self, clock: SimpleNamespace, seconds: float):
        self.clock, self.seconds = clock, seconds

    def apply(self, model: onnx.ModelProto) -> onnx.ModelProto:
        self.clock.now += self.seconds
        return model


def test_run_passes_reports_the_time_each_pass_itself_took_in_seconds(
    resnet: onnx.ModelProto, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a clock that moves only while a pass runs: 1.23456 s in the first, 0.5 s in the second
    clock = SimpleNamespace(now=50.0)
    monkeypatch.setattr(model_pass, "time", SimpleNamespace(perf_counter=lambda: clock.now))
    # when
    _, reports = run_passes(resnet, [_TakesTime(clock, 1.23456), _TakesTime(clock, 0.5)])
    # then each report has its own pass's time (not the running total), to 0.1 ms
    assert [r.seconds for r in reports] == [1.2346, 0.5]
    assert [(r.nodes_before == r.nodes_after, r.detail) for r in reports] == [(True, ""), (True, "")], (
        "a pass that changed nothing says so"
    )


def test_run_passes_when_pass_has_no_detail_reports_the_op_difference(resnet: onnx.ModelProto) -> None:
    _, [report] = run_passes(resnet, [_DropFirstRelu()])
    assert report.detail == "-1 Relu"


def test_pass_report_when_serialised_has_every_field() -> None:
    report = PassReport("noop_removal", 10, 8, 0.01, "removed 2 Identity")
    assert report.to_dict() == {
        "name": "noop_removal",
        "nodes_before": 10,
        "nodes_after": 8,
        "seconds": 0.01,
        "detail": "removed 2 Identity",
    }
