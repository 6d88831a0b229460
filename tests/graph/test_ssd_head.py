"""find_ssd_head: what the shipped TF SSD graph's post-processing does, read from the graph itself."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from edge_sdk.core.errors import ModelError
from edge_sdk.graph.ssd_head import find_ssd_head, is_ssd_graph


def test_find_ssd_head_when_given_the_shipped_detector_reads_its_post_processing_settings(
    detector: onnx.ModelProto,
) -> None:
    # when
    head = find_ssd_head(detector)

    # then
    decoding = head.decoding
    assert (head.box_encodings, head.class_scores) == ("Squeeze:0", "Postprocessor/Slice:0"), (
        "the raw encodings and the converted scores are where TF's post-processing starts"
    )
    assert decoding.scale_factors == pytest.approx((10.0, 10.0, 5.0, 5.0)), "TF's box coder scales y, x, h, w"
    assert decoding.multipliers == (np.float32(0.1), np.float32(0.1), np.float32(0.2), np.float32(0.2)), (
        "the graph multiplies by these float32 constants; the host must use the same ones"
    )
    assert decoding.score_threshold == pytest.approx(1e-8), "the NMS score threshold of the exported config"
    assert decoding.iou_threshold == pytest.approx(0.6), "the NMS IoU threshold of the exported config"
    assert (decoding.max_per_class, decoding.max_total) == (100, 100), "detections kept per class and in total"
    assert decoding.clip_window == (0.0, 0.0, 1.0, 1.0), "a fixed-shape resizer clips to the whole image"
    assert decoding.class_id_offset == 1.0, "TF's label_id_offset: the first class is 1 in detection_classes"
    assert head.input_size == (300, 300) and head.resized_layout == "nchw", "tf2onnx moved a transpose into the Loop"
    constant = {i.name: numpy_helper.to_array(i) for i in detector.graph.initializer}["Postprocessor/ExpandDims:0"]
    np.testing.assert_array_equal(decoding.anchors, constant.reshape(-1, 4), "the anchors are the graph's constant")


def test_find_ssd_head_when_the_model_is_not_an_ssd_graph_raises_model_error_saying_what_is_missing(
    resnet: onnx.ModelProto,
) -> None:
    # when / then
    with pytest.raises(ModelError, match=r"TensorFlow Object Detection API SSD graph.*NonMaxSuppression"):
        find_ssd_head(resnet)
    assert not is_ssd_graph(resnet), "a classifier is not an SSD graph"


def test_find_ssd_head_when_the_nms_threshold_changes_reads_the_new_value(detector: onnx.ModelProto) -> None:
    # given the same graph exported with another IoU threshold
    changed = onnx.ModelProto()
    changed.CopyFrom(detector)
    name = "Postprocessor/BatchMultiClassNonMaxSuppression/map/while/MultiClassNonMaxSuppression/non_max_suppression/iou_threshold:0"
    for init in changed.graph.initializer:
        if init.name == name:
            init.CopyFrom(numpy_helper.from_array(np.array(0.45, np.float32), name))

    # when
    decoding = find_ssd_head(changed).decoding

    # then
    assert decoding.iou_threshold == pytest.approx(0.45), "the threshold is read from the graph, not assumed"
