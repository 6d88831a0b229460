"""describe_model and `edge-sdk inspect`: what is in a model and what the graph passes change."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edge_sdk.core.errors import ModelError
from edge_sdk.graph.inspect import describe_model
from tests.cli.test_cli import assert_one_line_error, edge_sdk
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.slow  # multi-process runs or subprocesses: not in make test-fast


def test_describe_model_when_given_the_detector_lists_inputs_outputs_and_op_counts(demo_model: Path) -> None:
    summary = describe_model(demo_model)
    assert [m.name for m in summary.inputs] == ["image_tensor:0"]
    assert summary.inputs[0].dtype.name == "uint8" and summary.inputs[0].shape[3] == 3
    assert [m.name for m in summary.outputs] == [
        "num_detections:0",
        "detection_boxes:0",
        "detection_scores:0",
        "detection_classes:0",
    ]
    assert summary.opset == 13
    assert summary.op_counts["BatchNormalization"] == 4
    assert next(iter(summary.op_counts)) == "Conv", "most frequent op first"
    assert summary.nodes == sum(summary.op_counts.values()) == 341
    assert summary.subgraph_nodes > 0, "the NMS loops have bodies"
    assert 12_000_000 < summary.initializer_bytes < 13_000_000


def test_describe_model_when_file_is_not_onnx_raises_model_error(tmp_path: Path) -> None:
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes(b"\x08\x07this is not a protobuf model")
    with pytest.raises(ModelError, match="is not a valid ONNX model"):
        describe_model(corrupt)


def test_inspect_when_given_the_detector_shows_tensors_ops_and_each_pass(tmp_path: Path, demo_model: Path) -> None:
    # when
    done = edge_sdk("inspect", demo_model, cache=tmp_path / "engines")
    # then
    assert done.returncode == 0, done.stderr
    for fragment in ("image_tensor:0", "detection_boxes:0", "uint8", "opset 13", "BatchNormalization"):
        assert fragment in done.stdout, f"inspect should show {fragment!r}"
    for name in ("shape_inference", "constant_folding", "noop_removal", "batchnorm_folding"):
        assert name in done.stdout, f"the pass table should list {name}"
    assert "folded 4 BatchNormalization" in done.stdout
    assert "341 -> 328 nodes" in done.stdout


def test_inspect_when_json_with_batch_reports_passes_and_the_new_batch_axis(tmp_path: Path, demo_model: Path) -> None:
    done = edge_sdk("inspect", demo_model, "--batch", "1", "--json", cache=tmp_path / "engines")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["model"]["nodes"] == 341
    passes = {p["name"]: p for p in report["passes"]}
    assert passes["batchnorm_folding"]["nodes_before"] - passes["batchnorm_folding"]["nodes_after"] == 4
    assert passes["batch_size"]["detail"].endswith("-> 1")
    assert report["optimized"]["inputs"][0]["shape"][0] == 1
    assert report["optimized"]["op_counts"].get("BatchNormalization", 0) == 0


def test_inspect_when_given_a_pipeline_folds_its_preprocessing(tmp_path: Path) -> None:
    done = edge_sdk("inspect", "--pipeline", REPO_ROOT / "pipelines" / "demo.yaml", "--json", cache=tmp_path / "e")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["passes"][0]["name"] == "preprocess_folding"
    assert report["model"]["name"] == "ssdlite_mobilenet_v2_person.onnx", "MODEL defaults to the pipeline's"


def test_inspect_when_model_is_corrupt_prints_one_line_and_exits_2(tmp_path: Path) -> None:
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes(b"\x08\x07this is not a protobuf model")
    done = edge_sdk("inspect", corrupt, cache=tmp_path / "engines")
    assert_one_line_error(done, "corrupt.onnx is not a valid ONNX model")
    assert done.returncode == 2


def test_inspect_when_model_is_missing_prints_one_line_and_exits_2(tmp_path: Path) -> None:
    done = edge_sdk("inspect", tmp_path / "absent.onnx", cache=tmp_path / "engines")
    assert_one_line_error(done, "model file not found", "absent.onnx")
    assert done.returncode == 2


def test_inspect_when_batch_is_not_a_number_names_the_option(tmp_path: Path, demo_model: Path) -> None:
    done = edge_sdk("inspect", demo_model, "--batch", "many", cache=tmp_path / "engines")
    assert_one_line_error(done, "--batch: expected a positive integer or 'dynamic', got 'many'")
