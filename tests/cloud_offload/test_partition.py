"""The partition planner (cloud_offload/partition.py): where a model can be cut, and head + tail
computing what the whole model computes, on real models run by ONNX Runtime."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import onnx
import onnxruntime
import pytest

from cloud_offload.partition import cut_points, measure_cuts, split_model, useful_cuts
from tests.conftest import ASTRONAUT, REPO_ROOT
from tools.harness import onnx_models

DETECTOR = REPO_ROOT / "models" / "ssdlite_mobilenet_v2_person.onnx"


def run(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [out.name for out in session.get_outputs()]
    return dict(zip(names, session.run(names, feed), strict=True))


def run_split(model: onnx.ModelProto, measured: object, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    head, tail = split_model(model, measured)  # type: ignore[arg-type]
    return run(tail, run(head, feed))


def test_a_chain_can_be_cut_after_every_node_and_one_tensor_crosses(tmp_path: Path) -> None:
    # given Conv -> Relu -> GlobalAveragePool -> Flatten -> Gemm
    model = onnx.load(onnx_models.float_classifier(tmp_path / "chain.onnx", batch=1))
    # when
    cuts = cut_points(model)
    # then each of the four inner tensors is a cut, alone
    assert [cut.tensors for cut in cuts] == [("conv",), ("relu",), ("pool",), ("flat",)]


def test_a_residual_block_is_cut_between_blocks_with_one_tensor_and_inside_with_two(tmp_path: Path) -> None:
    model = onnx.load(onnx_models.resnet18_like(tmp_path / "resnet.onnx", width=8, batch=1, classes=10, size=32))
    cuts = cut_points(model)
    crossing = {len(cut.tensors) for cut in cuts}
    assert crossing == {1, 2}, "inside a block the shortcut crosses too; between blocks one tensor does"
    assert all(not any(name.endswith((".w", ".gamma")) for name in cut.tensors) for cut in cuts), "no weights cross"


def test_head_then_tail_computes_what_the_whole_model_computes_at_every_cut(tmp_path: Path) -> None:
    model = onnx.load(onnx_models.resnet18_like(tmp_path / "resnet.onnx", width=8, batch=1, classes=10, size=32))
    feed = {"images": np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)}
    whole = run(model, feed)["logits"]
    for measured in measure_cuts(model, cut_points(model), feed):
        np.testing.assert_allclose(run_split(model, measured, feed)["logits"], whole, rtol=1e-4, atol=1e-4)


def test_useful_cuts_send_fewer_bytes_than_every_earlier_cut_and_than_the_input(tmp_path: Path) -> None:
    model = onnx.load(onnx_models.resnet18_like(tmp_path / "resnet.onnx", width=8, batch=1, classes=10, size=32))
    feed = {"images": np.zeros((1, 3, 32, 32), np.float32)}
    measured = measure_cuts(model, cut_points(model), feed)
    useful = useful_cuts(measured, feed["images"].nbytes)
    sizes = [m.bytes for m in useful]
    assert useful and sizes == sorted(sizes, reverse=True) and sizes[0] < feed["images"].nbytes
    assert len(useful) < len(measured), "cuts that send more than an earlier one are dropped"


@pytest.fixture(scope="module")
def detector_frame() -> dict[str, np.ndarray]:
    image = cv2.cvtColor(cv2.resize(cv2.imread(str(ASTRONAUT)), (300, 300)), cv2.COLOR_BGR2RGB)
    return {"image_tensor:0": image[np.newaxis]}


def test_the_shipped_detector_splits_outside_its_loops_and_the_halves_find_the_same_person(
    detector_frame: dict[str, np.ndarray],
) -> None:
    # given the TF SSD, whose resize and NMS are Loops reading tensors of the main graph
    model = onnx.load(str(DETECTOR))
    whole = run(model, detector_frame)
    # when its useful cuts are measured on a frame
    measured = measure_cuts(model, cut_points(model), detector_frame)
    useful = useful_cuts(measured, detector_frame["image_tensor:0"].nbytes)
    # then some cuts send less than the frame, and head + tail find the person as the model does
    assert useful, "the backbone shrinks the frame before its heads"
    for cut in (useful[0], useful[len(useful) // 2], useful[-1]):
        split = run_split(model, cut, detector_frame)
        assert int(split["num_detections:0"][0]) == int(whole["num_detections:0"][0]), cut.cut.after
        np.testing.assert_allclose(split["detection_scores:0"], whole["detection_scores:0"], atol=1e-4)
        np.testing.assert_allclose(split["detection_boxes:0"], whole["detection_boxes:0"], atol=1e-4)
