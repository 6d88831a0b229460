"""Fixing or freeing the batch axis, and refusing graphs that hard-code it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from edge_sdk.core.errors import ModelError
from edge_sdk.graph import BatchSize
from tools.harness.onnx_models import fixed_batch_reshape_classifier, resnet18_like

from .helpers import images, run


def _batch_dims(model: onnx.ModelProto) -> list[int | str]:
    infos = [*model.graph.input, *model.graph.output]
    return [
        dim.dim_value if dim.HasField("dim_value") else dim.dim_param
        for dim in (info.type.tensor_type.shape.dim[0] for info in infos)
    ]


@pytest.fixture(scope="module")
def resnet_batch_1(tmp_path_factory: pytest.TempPathFactory) -> onnx.ModelProto:
    path = resnet18_like(tmp_path_factory.mktemp("b1") / "resnet_b1.onnx", width=8, batch=1, size=64)
    return onnx.load(str(path))


def test_batch_size_when_made_dynamic_runs_a_batch_of_three_like_three_single_runs(
    resnet_batch_1: onnx.ModelProto,
) -> None:
    # given a model exported with batch 1
    assert _batch_dims(resnet_batch_1) == [1, 1]
    # when
    pass_ = BatchSize(None)
    dynamic = pass_.apply(resnet_batch_1)
    # then
    assert _batch_dims(dynamic) == ["N", "N"]
    assert pass_.detail == "batch axis 1 -> N"
    batch = images(batch=3, size=64)["images"]
    together = run(dynamic, {"images": batch})[0]
    one_by_one = np.concatenate([run(resnet_batch_1, {"images": batch[i : i + 1]})[0] for i in range(3)])
    np.testing.assert_allclose(together, one_by_one, rtol=1e-4, atol=1e-4)


def test_batch_size_when_fixed_sets_input_and_output_axis_0(resnet: onnx.ModelProto) -> None:
    fixed = BatchSize(4).apply(resnet)
    assert _batch_dims(fixed) == [4, 4]
    assert run(fixed, images(batch=4))[0].shape == (4, 1000)


def test_batch_size_when_detector_is_made_dynamic_runs_two_frames_like_one_each(
    detector: onnx.ModelProto, detector_feeds: dict[str, np.ndarray]
) -> None:
    frame = detector_feeds["image_tensor:0"]
    mirrored = np.ascontiguousarray(frame[:, :, ::-1])
    dynamic = BatchSize(None).apply(detector)
    both = run(dynamic, {"image_tensor:0": np.concatenate([frame, mirrored])})
    first, second = run(detector, {"image_tensor:0": frame}), run(detector, {"image_tensor:0": mirrored})
    for index, name in enumerate(("num_detections", "boxes", "scores", "classes")):
        np.testing.assert_allclose(both[index][0], first[index][0], atol=1e-5, err_msg=name)
        np.testing.assert_allclose(both[index][1], second[index][0], atol=1e-5, err_msg=name)


def test_batch_size_when_reshape_hard_codes_batch_1_refuses_with_model_error(tmp_path: Path) -> None:
    # given a classifier whose Reshape is [1, -1]: naively freeing its batch axis breaks it
    model = onnx.load(str(fixed_batch_reshape_classifier(tmp_path / "fixed.onnx")))
    naive = onnx.ModelProto()
    naive.CopyFrom(model)
    for info in (naive.graph.input[0], naive.graph.output[0]):
        info.type.tensor_type.shape.dim[0].dim_param = "N"
    batch_2 = images(batch=2, size=8)
    with pytest.raises(Exception):  # noqa: B017 - ONNX Runtime's own error types
        assert run(naive, batch_2)[0].shape == (2, 4), "the naive edit gives a wrong shape"
    # when / then
    with pytest.raises(ModelError, match=r"Reshape 'view_1_minus_1' turns the batch axis into a fixed 1"):
        BatchSize(None).apply(model)
    with pytest.raises(ModelError, match="cannot take another batch size"):
        BatchSize(2).apply(model)
    assert _batch_dims(BatchSize(1).apply(model)) == [1, 1], "the batch it was made for is fine"


@pytest.mark.parametrize("bad", [0, -1, True, "2"])
def test_batch_size_when_not_a_positive_integer_raises(bad: object) -> None:
    with pytest.raises(ModelError, match="expected a positive integer or None"):
        BatchSize(bad)  # type: ignore[arg-type]


def test_batch_size_when_batch_axis_has_no_name_sets_it(resnet: onnx.ModelProto) -> None:
    # given an exporter that left axis 0 of the input and output without a size or a name
    unnamed = onnx.ModelProto()
    unnamed.CopyFrom(resnet)
    for info in (unnamed.graph.input[0], unnamed.graph.output[0]):
        info.type.tensor_type.shape.dim[0].Clear()
    # when / then
    assert _batch_dims(BatchSize(2).apply(unnamed)) == [2, 2]
