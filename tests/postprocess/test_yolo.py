"""YOLO decode + NMS: on a real YOLOv8n output (tests/fixtures/yolo) and on hand-made heads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import TypeAdapter

from edge_sdk.core.errors import ModelError
from edge_sdk.core.geometry import InputGeometry
from edge_sdk.core.preprocess import Preprocessor, PreprocessSpec
from edge_sdk.core.results import Detection, FrameMeta, Result
from edge_sdk.core.tensor_meta import TensorMeta
from edge_sdk.postprocess import PostprocessSpec, build_postprocessor
from edge_sdk.postprocess.yolo import YoloPostprocessor, YoloSpec

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "yolo" / "nudenet_320n_astronaut.npz"
FRAME = FrameMeta(source="cam", index=3, timestamp=0.0, width=320, height=320)
GEOMETRY = InputGeometry.identity(320, 320)


@pytest.fixture(scope="module")
def nudenet() -> dict[str, Any]:
    with np.load(FIXTURE) as data:
        return {name: data[name] for name in data.files}


def yolo(classes: int = 1, **spec: Any) -> YoloPostprocessor:
    """A YOLO post-processor reading output 'head'; labels default to 'c0', 'c1', ... for `classes` classes."""
    spec.setdefault("labels", [f"c{i}" for i in range(classes)])
    return YoloPostprocessor(YoloSpec(type="yolo", output="head", **spec))


def v8_head(*anchors: tuple[float, ...]) -> np.ndarray:
    """One frame's v8 head [4 + classes, anchors] from rows (cx, cy, w, h, class scores...)."""
    return np.asarray(anchors, dtype=np.float32).T.copy()


def boxes_of(result: Result) -> list[tuple[float, float, float, float]]:
    return [(d.x1, d.y1, d.x2, d.y2) for d in result.detections]


def iou(a: Detection, b: np.ndarray) -> float:
    width = max(0.0, min(a.x2, b[2]) - max(a.x1, b[0]))
    height = max(0.0, min(a.y2, b[3]) - max(a.y1, b[1]))
    inter = width * height
    return float(inter / ((a.x2 - a.x1) * (a.y2 - a.y1) + (b[2] - b[0]) * (b[3] - b[1]) - inter))


CASES = ["nudenet_defaults", "low_threshold_per_class", "low_threshold_agnostic", "low_threshold_top2"]


@pytest.mark.parametrize("case", CASES)
def test_yolo_postprocessor_when_given_a_real_yolov8n_output_reproduces_the_reference_boxes(
    nudenet: dict[str, Any], case: str
) -> None:
    # given nudenet's YOLOv8n output on a letterboxed photo, and boxes decoded by an independent reference
    score_threshold, iou_threshold, agnostic, max_detections = nudenet[f"{case}__settings"]
    post = build_postprocessor(
        YoloSpec(
            type="yolo",
            version="v8",
            output="output0",
            score_threshold=score_threshold,
            iou_threshold=iou_threshold,
            class_agnostic_nms=bool(agnostic),
            max_detections=int(max_detections),
            labels=nudenet["labels"].tolist(),
        )
    )
    width, height = nudenet["frame_size"].tolist()
    frame = FrameMeta(source="astronaut", index=0, timestamp=0.0, width=width, height=height)
    input_width, input_height, scale_x, scale_y, pad_x, pad_y = nudenet["geometry"].tolist()
    geometry = InputGeometry(int(input_width), int(input_height), scale_x, scale_y, pad_x, pad_y)
    reference_boxes, reference_scores = nudenet[f"{case}__boxes"], nudenet[f"{case}__scores"]
    reference_classes = nudenet[f"{case}__classes"]

    # when
    detections = post({"output0": nudenet["output0"][0]}, frame, geometry).detections

    # then
    assert [d.class_id for d in detections] == reference_classes.tolist(), (
        "the same classes, in the same best-first order, as the reference decode"
    )
    assert [d.label for d in detections] == [nudenet["labels"][c] for c in reference_classes], (
        "each class is named from the labels"
    )
    assert [d.score for d in detections] == pytest.approx(reference_scores.tolist(), abs=1e-4), (
        "each box keeps the score of its best class"
    )
    for det, reference in zip(detections, reference_boxes, strict=True):
        assert iou(det, reference) > 0.99, f"{det.label} lands where the reference put it in the frame ({reference})"


def test_yolo_postprocessor_when_the_real_output_is_transposed_finds_the_same_boxes(nudenet: dict[str, Any]) -> None:
    # given the same real output as [anchors, 4 + classes]
    post = YoloPostprocessor(
        YoloSpec(type="yolo", output="output0", score_threshold=0.02, labels=nudenet["labels"].tolist())
    )
    head = nudenet["output0"][0]

    # when
    standard = post({"output0": head}, FRAME, GEOMETRY)
    transposed = post({"output0": np.ascontiguousarray(head.T)}, FRAME, GEOMETRY)

    # then
    assert len(standard.detections) == 3, "the low threshold finds three boxes on the photo"
    assert transposed.detections == standard.detections, "the layout is recognised from the class count"


def test_yolo_postprocessor_when_version_is_v5_multiplies_objectness_by_class_probability() -> None:
    # given two v5 anchors [cx, cy, w, h, objectness, p(class 0), p(class 1)]
    post = yolo(classes=2, version="v5", score_threshold=0.3)
    head = np.array(
        [
            [50, 50, 20, 20, 0.9, 0.1, 0.5],  # 0.9 x 0.5 = 0.45 for class 1
            [200, 200, 20, 20, 0.3, 0.9, 0.1],  # 0.3 x 0.9 = 0.27: a confident class on a doubtful box
        ],
        dtype=np.float32,
    )

    # when
    detections = post({"head": head}, FRAME, GEOMETRY).detections

    # then
    assert [(d.class_id, d.score) for d in detections] == [(1, pytest.approx(0.45))], (
        "a box scores objectness x class probability, and the low-objectness box falls under the threshold"
    )
    assert boxes_of(post({"head": head}, FRAME, GEOMETRY)) == [pytest.approx((40, 40, 60, 60))], (
        "cx, cy, w, h become corners"
    )


def test_yolo_postprocessor_when_v8_head_is_transposed_reads_the_classes_from_the_right_axis() -> None:
    # given 3 anchors of 4 + 2 values, laid out [anchors, values] as well as [values, anchors]
    anchors = [
        (30.0, 50.0, 20.0, 10.0, 0.1, 0.2),
        (100.0, 200.0, 40.0, 20.0, 0.1, 0.8),
        (250.0, 50.0, 20.0, 10.0, 0.0, 0.1),
    ]
    post = yolo(classes=2)

    # when
    standard = post({"head": v8_head(*anchors)}, FRAME, GEOMETRY)
    transposed = post({"head": np.asarray(anchors, dtype=np.float32)}, FRAME, GEOMETRY)

    # then
    assert boxes_of(transposed) == [pytest.approx((80, 190, 120, 210))], "the one confident anchor, as corners"
    assert transposed.detections == standard.detections, "the labels say which axis holds 4 + 2 values"


def test_yolo_postprocessor_when_unlabelled_takes_the_longer_axis_as_anchors(nudenet: dict[str, Any]) -> None:
    # given the real output without labels, in both layouts
    post = YoloPostprocessor(YoloSpec(type="yolo", output="output0", score_threshold=0.02))
    head = nudenet["output0"][0]

    # when
    standard = post({"output0": head}, FRAME, GEOMETRY)
    transposed = post({"output0": np.ascontiguousarray(head.T)}, FRAME, GEOMETRY)

    # then
    assert [d.label for d in standard.detections] == ["1", "16", "12"], "without labels, classes show as their ids"
    assert transposed.detections == standard.detections, "2100 anchors against 22 values: the layout is clear"


def test_yolo_postprocessor_when_boxes_of_one_class_overlap_keeps_the_best_one() -> None:
    # given two heavily overlapping class-0 boxes and a third class-0 box elsewhere
    post = yolo(classes=2, iou_threshold=0.5)
    head = v8_head(
        (100, 100, 40, 40, 0.7, 0.0),
        (102, 101, 40, 40, 0.9, 0.0),
        (250, 250, 40, 40, 0.6, 0.0),
    )

    # when
    detections = post({"head": head}, FRAME, GEOMETRY).detections

    # then
    assert [d.score for d in detections] == pytest.approx([0.9, 0.6]), (
        "the weaker of two overlapping boxes is suppressed; a separate box of the same class stays"
    )


def test_yolo_postprocessor_when_boxes_of_different_classes_overlap_keeps_both_per_class() -> None:
    # given two overlapping boxes, one of class 0 and one of class 1
    head = v8_head((100, 100, 40, 40, 0.9, 0.0), (102, 101, 40, 40, 0.0, 0.7))

    # when
    per_class = yolo(classes=2)({"head": head}, FRAME, GEOMETRY).detections
    agnostic = yolo(classes=2, class_agnostic_nms=True)({"head": head}, FRAME, GEOMETRY).detections

    # then
    assert [d.class_id for d in per_class] == [0, 1], "NMS per class leaves a box of another class alone"
    assert [d.class_id for d in agnostic] == [0], "class-agnostic NMS lets the better box suppress the other class"


def test_yolo_postprocessor_when_overlap_is_under_the_iou_threshold_keeps_both() -> None:
    # given two class-0 boxes overlapping with IoU 1/3 (each 40x40, shifted by 20 px)
    head = v8_head((100, 100, 40, 40, 0.9), (120, 100, 40, 40, 0.8))

    # when
    loose = yolo(iou_threshold=0.5)({"head": head}, FRAME, GEOMETRY).detections
    strict = yolo(iou_threshold=0.3)({"head": head}, FRAME, GEOMETRY).detections

    # then
    assert len(loose) == 2, "an overlap below iou_threshold does not suppress"
    assert len(strict) == 1, "the same overlap above a lower iou_threshold does"


def test_yolo_postprocessor_when_scores_straddle_the_threshold_keeps_those_at_or_above_it() -> None:
    # given four separate boxes
    head = v8_head(
        (20, 20, 10, 10, 0.9),
        (80, 20, 10, 10, 0.5),
        (140, 20, 10, 10, 0.49),
        (200, 20, 10, 10, 0.1),
    )

    # when
    detections = yolo(score_threshold=0.5)({"head": head}, FRAME, GEOMETRY).detections

    # then
    assert [d.score for d in detections] == pytest.approx([0.9, 0.5]), "boxes below score_threshold are dropped"


def test_yolo_postprocessor_when_nothing_reaches_the_threshold_gives_an_empty_result() -> None:
    # given
    head = v8_head((20, 20, 10, 10, 0.2, 0.1))

    # when
    result = yolo(classes=2, score_threshold=0.5)({"head": head}, FRAME, GEOMETRY)

    # then
    assert result == Result(frame=FRAME), "no box above the threshold is an empty result for this frame"


def test_yolo_postprocessor_when_more_boxes_than_max_detections_keeps_the_best() -> None:
    # given five separate boxes scoring 0.5 .. 0.9 in shuffled order
    scores = [0.6, 0.9, 0.5, 0.8, 0.7]
    head = v8_head(*[(30 + 60 * i, 30, 20, 20, s) for i, s in enumerate(scores)])

    # when
    detections = yolo(max_detections=3)({"head": head}, FRAME, GEOMETRY).detections

    # then
    assert [d.score for d in detections] == pytest.approx([0.9, 0.8, 0.7]), (
        "max_detections keeps that many boxes, best first"
    )


def test_yolo_postprocessor_when_input_was_letterboxed_maps_boxes_back_to_the_frame() -> None:
    # given a 640x480 frame letterboxed into 320x320: scale 0.5, 40 rows of padding above
    frame = FrameMeta(source="cam", index=0, timestamp=0.0, width=640, height=480)
    model_input = TensorMeta("images", np.dtype(np.float32), (1, 3, 320, 320))
    spec = PreprocessSpec(resize=(320, 320), resize_mode="letterbox", layout="nchw", dtype="float32")
    geometry = Preprocessor(spec, model_input).geometry(frame.width, frame.height)
    head = v8_head((160, 160, 100, 60, 0.9))  # input box (110, 130) - (210, 190)

    # when
    (det,) = yolo()({"head": head}, frame, geometry).detections

    # then
    assert (det.x1, det.y1, det.x2, det.y2) == pytest.approx((220, 180, 420, 300)), (
        "the padding is subtracted and the scale divided out, giving frame pixels"
    )


def test_yolo_postprocessor_when_a_box_reaches_into_the_padding_clips_it_to_the_frame() -> None:
    # given the same letterbox and a box spilling over the top padding and the left edge
    frame = FrameMeta(source="cam", index=0, timestamp=0.0, width=640, height=480)
    geometry = InputGeometry(320, 320, 0.5, 0.5, 0, 40)
    head = v8_head((10, 50, 60, 40, 0.9))  # input box (-20, 30) - (40, 70)

    # when
    (det,) = yolo()({"head": head}, frame, geometry).detections

    # then
    assert (det.x1, det.y1, det.x2, det.y2) == pytest.approx((0, 0, 80, 60)), "a box never leaves the frame"


def test_yolo_postprocessor_when_labels_are_given_names_each_class() -> None:
    # given
    head = v8_head((50, 50, 20, 20, 0.1, 0.9), (200, 200, 20, 20, 0.8, 0.1))

    # when
    detections = yolo(labels=["cat", "dog"])({"head": head}, FRAME, GEOMETRY).detections

    # then
    assert [(d.class_id, d.label) for d in detections] == [(1, "dog"), (0, "cat")], "labels are looked up by class id"


def test_yolo_postprocessor_when_the_output_has_the_wrong_number_of_classes_raises_model_error() -> None:
    # given a head with 4 + 2 values per anchor, but three labels
    post = yolo(labels=["a", "b", "c"])
    head = v8_head(*[(50, 50, 20, 20, 0.9, 0.1)] * 10)

    # when
    with pytest.raises(ModelError) as caught:
        post({"head": head}, FRAME, GEOMETRY)

    # then
    message = str(caught.value)
    assert "expected 4 box values + 3 classes" in message, "the error says how many values the labels imply"
    assert "got shape (6, 10)" in message, "the error shows the shape that came"


def test_yolo_postprocessor_when_v5_output_lacks_objectness_raises_model_error() -> None:
    # given a v5 postprocessor fed [anchors, 5] (no room for any class)
    post = yolo(version="v5", labels=[])

    # when
    with pytest.raises(ModelError) as caught:
        post({"head": np.zeros((100, 5), np.float32)}, FRAME, GEOMETRY)

    # then
    assert "expected 4 box values + objectness + at least 1 class" in str(caught.value), "the error names the layout"
    assert "got shape (100, 5)" in str(caught.value), "the error shows the shape that came"


def test_yolo_postprocessor_when_scores_are_logits_raises_model_error() -> None:
    # given a head exported without its sigmoid
    head = v8_head((50, 50, 20, 20, 4.5))

    # when
    with pytest.raises(ModelError) as caught:
        yolo()({"head": head}, FRAME, GEOMETRY)

    # then
    assert "expected class scores in [0, 1]" in str(caught.value), "logits are reported, not turned into boxes"


def test_yolo_check_outputs_when_the_output_is_missing_raises_model_error_naming_it() -> None:
    # given a model whose only output has another name
    post = build_postprocessor(YoloSpec(type="yolo", output="output0"))
    model_outputs = [TensorMeta("boxes", np.dtype(np.float32), ("batch", 84, 8400))]

    # when
    with pytest.raises(ModelError) as caught:
        post.check_outputs(model_outputs)

    # then
    assert "output0" in str(caught.value), "the error names the output the post-processor wanted"
    assert "boxes" in str(caught.value), "the error lists the outputs the model has"


def test_yolo_check_outputs_when_the_class_count_differs_from_the_labels_raises_model_error() -> None:
    # given nudenet's output metadata (22 = 4 + 18 values, anchors symbolic) and the 80 COCO labels
    post = build_postprocessor(YoloSpec(type="yolo", labels=[f"class{i}" for i in range(80)]))
    model_outputs = [TensorMeta("output0", np.dtype(np.float32), ("batch", 22, "anchors"))]

    # when
    with pytest.raises(ModelError) as caught:
        post.check_outputs(model_outputs)

    # then
    message = str(caught.value)
    assert "expected 4 box values + 80 classes (the labels) = 84 values per anchor" in message, (
        "the mismatch is caught from the model's metadata, before any frame"
    )
    assert message.endswith("got 22"), "the error shows the size the model has"


def test_yolo_check_outputs_when_the_output_fits_accepts_the_model() -> None:
    # given
    post = build_postprocessor(YoloSpec(type="yolo", labels=[f"class{i}" for i in range(18)]))

    # when / then: no error for either layout
    post.check_outputs([TensorMeta("output0", np.dtype(np.float32), ("batch", 22, "anchors"))])
    post.check_outputs([TensorMeta("output0", np.dtype(np.float32), (1, 2100, 22))])


def test_yolo_spec_when_read_from_a_pipeline_mapping_builds_the_yolo_postprocessor() -> None:
    # given the postprocess: section of a pipeline file
    section = {"type": "yolo", "version": "v5", "output": "output0", "iou_threshold": 0.6, "labels": ["person"]}

    # when
    spec = TypeAdapter(PostprocessSpec).validate_python(section)

    # then
    assert isinstance(spec, YoloSpec) and spec.version == "v5", "type: yolo selects the YOLO spec"
    assert isinstance(build_postprocessor(spec), YoloPostprocessor), "the registry builds the YOLO post-processor"
