"""run_passes: one report per pass, in order, with node counts and what changed."""

from __future__ import annotations

import onnx

from edge_sdk.graph import BatchNormFolding, NoOpRemoval, PassReport, run_passes


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
    assert reports[1].detail == "folded 20 BatchNormalization"
    assert len(optimized.graph.node) == nodes - 22
    assert all(r.seconds >= 0 for r in reports)


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
