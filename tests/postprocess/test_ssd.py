"""SSD post-processing on hand-made output arrays (one frame each, batch axis already removed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edge_sdk.core.errors import ConfigError, ModelError
from edge_sdk.core.geometry import InputGeometry
from edge_sdk.core.results import FrameMeta
from edge_sdk.core.tensor_meta import TensorMeta
from edge_sdk.postprocess import build_postprocessor
from edge_sdk.postprocess.ssd import SsdPostprocessor, SsdSpec
from tools.harness import onnx_models

FRAME = FrameMeta(source="cam", index=7, timestamp=0.0, width=200, height=100)
GEOMETRY = InputGeometry.identity(FRAME.width, FRAME.height)


def ssd_outputs(
    boxes: list[list[float]], scores: list[float], classes: list[float], count: float | None = None
) -> dict[str, np.ndarray]:
    """Arrays named like the TF Object Detection API exports them."""
    outputs = {
        "detection_boxes:0": np.asarray(boxes, dtype=np.float32),
        "detection_scores:0": np.asarray(scores, dtype=np.float32),
        "detection_classes:0": np.asarray(classes, dtype=np.float32),
    }
    outputs["num_detections:0"] = np.float32(len(scores) if count is None else count)
    return outputs


def test_ssd_postprocessor_when_scores_straddle_the_threshold_keeps_only_those_at_or_above_it() -> None:
    # given
    post = SsdPostprocessor(SsdSpec(type="ssd", score_threshold=0.5))
    outputs = ssd_outputs([[0.1, 0.1, 0.2, 0.2]] * 4, [0.9, 0.5, 0.49, 0.1], [1, 1, 1, 1])

    # when
    result = post(outputs, FRAME, GEOMETRY)

    # then
    assert [d.score for d in result.detections] == pytest.approx([0.9, 0.5]), (
        "detections at or above the threshold are kept, in model order; the others are dropped"
    )
    assert result.frame == FRAME, "the result belongs to the frame it was computed for"


def test_ssd_postprocessor_when_count_is_below_k_ignores_the_padding_rows() -> None:
    # given three rows, of which the model says only the first is valid
    post = SsdPostprocessor(SsdSpec(type="ssd", score_threshold=0.3))
    outputs = ssd_outputs([[0.1, 0.1, 0.2, 0.2]] * 3, [0.8, 0.95, 0.9], [1, 1, 1], count=1)

    # when
    result = post(outputs, FRAME, GEOMETRY)

    # then
    assert [d.score for d in result.detections] == pytest.approx([0.8]), "rows past num_detections are not results"


def test_ssd_postprocessor_when_count_output_is_null_uses_every_row() -> None:
    # given
    post = SsdPostprocessor(SsdSpec(type="ssd", count=None, score_threshold=0.3))
    outputs = ssd_outputs([[0.1, 0.1, 0.2, 0.2]] * 3, [0.8, 0.95, 0.9], [1, 1, 1])
    del outputs["num_detections:0"]

    # when
    result = post(outputs, FRAME, GEOMETRY)

    # then
    assert len(result.detections) == 3, "without a count output, all K rows are considered"
    assert "num_detections:0" not in post.required_outputs(), "a null count output is not required from the model"


def test_ssd_postprocessor_when_boxes_are_yxyx_converts_them_to_pixel_corners() -> None:
    # given a normalised box ymin=0.1, xmin=0.2, ymax=0.5, xmax=0.8 on a 200x100 frame
    post = SsdPostprocessor(SsdSpec(type="ssd"))
    outputs = ssd_outputs([[0.1, 0.2, 0.5, 0.8]], [0.9], [1])

    # when
    (det,) = post(outputs, FRAME, GEOMETRY).detections

    # then
    assert (det.x1, det.y1, det.x2, det.y2) == pytest.approx((40.0, 10.0, 160.0, 50.0)), (
        "x scales by the frame width (200) and y by its height (100)"
    )


def test_ssd_postprocessor_when_boxes_are_xyxy_reads_x_first() -> None:
    # given the same box written as xmin, ymin, xmax, ymax
    post = SsdPostprocessor(SsdSpec(type="ssd", box_order="xyxy"))
    outputs = ssd_outputs([[0.2, 0.1, 0.8, 0.5]], [0.9], [1])

    # when
    (det,) = post(outputs, FRAME, GEOMETRY).detections

    # then
    assert (det.x1, det.y1, det.x2, det.y2) == pytest.approx((40.0, 10.0, 160.0, 50.0)), (
        "box_order xyxy gives the same pixel box as the yxyx form of it"
    )


def test_ssd_postprocessor_when_boxes_leave_the_frame_clips_them_to_its_edges() -> None:
    # given a box reaching past every edge
    post = SsdPostprocessor(SsdSpec(type="ssd"))
    outputs = ssd_outputs([[-0.2, -0.1, 1.3, 1.05]], [0.9], [1])

    # when
    (det,) = post(outputs, FRAME, GEOMETRY).detections

    # then
    assert (det.x1, det.y1, det.x2, det.y2) == pytest.approx((0.0, 0.0, 200.0, 100.0)), (
        "coordinates are clipped to [0, 1] before scaling, so the box stays inside the frame"
    )


def test_ssd_postprocessor_when_class_offset_and_labels_are_set_names_each_class() -> None:
    # given TF-style 1-based class ids and 0-based labels
    post = SsdPostprocessor(SsdSpec(type="ssd", class_offset=1, labels=["person", "bicycle"]))
    outputs = ssd_outputs([[0.1, 0.1, 0.2, 0.2]] * 3, [0.9, 0.8, 0.7], [1, 2, 5])

    # when
    detections = post(outputs, FRAME, GEOMETRY).detections

    # then
    assert [d.class_id for d in detections] == [0, 1, 4], "class_offset is subtracted from the model's class ids"
    assert [d.label for d in detections] == ["person", "bicycle", "4"], (
        "labels are looked up by offset id; an id without a label is shown as its number"
    )


def test_ssd_postprocessor_when_class_offset_is_zero_uses_ids_as_they_come() -> None:
    # given
    post = SsdPostprocessor(SsdSpec(type="ssd", class_offset=0, labels=["background", "person"]))
    outputs = ssd_outputs([[0.1, 0.1, 0.2, 0.2]], [0.9], [1])

    # when
    (det,) = post(outputs, FRAME, GEOMETRY).detections

    # then
    assert (det.class_id, det.label) == (1, "person"), "with offset 0 the model's id indexes the labels directly"


def test_ssd_postprocessor_when_nothing_passes_the_threshold_gives_an_empty_result() -> None:
    # given
    post = SsdPostprocessor(SsdSpec(type="ssd", score_threshold=0.6))
    outputs = ssd_outputs([[0.1, 0.1, 0.2, 0.2]], [0.59], [1])

    # when
    result = post(outputs, FRAME, GEOMETRY)

    # then
    assert result.detections == (), "no detection above the threshold means an empty result, not an error"


def test_ssd_check_outputs_when_outputs_are_missing_raises_model_error_naming_them() -> None:
    # given a model that only has boxes and scores
    post = build_postprocessor(SsdSpec(type="ssd"))
    model_outputs = [
        TensorMeta("detection_boxes:0", np.dtype(np.float32), ("N", 100, 4)),
        TensorMeta("detection_scores:0", np.dtype(np.float32), ("N", 100)),
    ]

    # when
    with pytest.raises(ModelError) as caught:
        post.check_outputs(model_outputs)

    # then
    message = str(caught.value)
    assert "detection_classes:0" in message and "num_detections:0" in message, "the error names every missing output"
    assert "detection_boxes:0" in message, "the error lists what the model does have"


def test_ssd_check_outputs_when_every_output_is_present_accepts_the_model() -> None:
    # given
    post = build_postprocessor(SsdSpec(type="ssd"))
    model_outputs = [
        TensorMeta(name, np.dtype(np.float32), ("N",))
        for name in ("num_detections:0", "detection_boxes:0", "detection_scores:0", "detection_classes:0")
    ]

    # when / then: no error
    post.check_outputs(model_outputs)


def test_ssd_postprocessor_when_input_was_letterboxed_maps_boxes_back_to_the_frame() -> None:
    # given a 200x100 frame letterboxed into a 300x300 input: scale 1.5, 75 rows of padding above
    geometry = InputGeometry(300, 300, 1.5, 1.5, 0, 75)
    post = SsdPostprocessor(SsdSpec(type="ssd"))
    # a box normalised to the input: x 0.2..0.8 (60..240 px), y 0.3..0.5 (90..150 px)
    outputs = ssd_outputs([[0.3, 0.2, 0.5, 0.8]], [0.9], [1])

    # when
    (det,) = post(outputs, FRAME, geometry).detections

    # then
    assert (det.x1, det.y1, det.x2, det.y2) == pytest.approx((40.0, 10.0, 160.0, 50.0)), (
        "input pixels lose the padding and the scale, giving the box in frame pixels"
    )


def test_ssd_postprocessor_when_a_box_reaches_into_the_letterbox_padding_clips_it_to_the_frame() -> None:
    # given the same letterbox and a box from the top of the input (inside the padding) to its middle
    geometry = InputGeometry(300, 300, 1.5, 1.5, 0, 75)
    post = SsdPostprocessor(SsdSpec(type="ssd"))
    outputs = ssd_outputs([[0.0, 0.0, 0.5, 1.0]], [0.9], [1])

    # when
    (det,) = post(outputs, FRAME, geometry).detections

    # then
    assert (det.x1, det.y1, det.x2, det.y2) == pytest.approx((0.0, 0.0, 200.0, 50.0)), (
        "the part of the box over the padding is cut at the frame's top edge"
    )


# --- decode: sdk (the engine cut after the box head; the host decodes) ---


def test_ssd_postprocessor_when_decode_is_sdk_without_a_decode_model_raises_config_error() -> None:
    # when / then
    with pytest.raises(ConfigError, match="decode_model"):
        SsdPostprocessor(SsdSpec(type="ssd", decode="sdk"))


def test_ssd_postprocessor_when_decode_model_is_not_an_ssd_graph_raises_model_error_naming_the_file(
    tmp_path: Path,
) -> None:
    # given a classifier
    model = onnx_models.float_classifier(tmp_path / "classifier.onnx")

    # when / then
    with pytest.raises(ModelError, match=r"decode: sdk needs .*TensorFlow Object Detection API SSD.*classifier\.onnx"):
        SsdPostprocessor(SsdSpec(type="ssd", decode="sdk", decode_model=model))


def test_ssd_postprocessor_when_decode_is_sdk_finds_on_the_cut_outputs_what_graph_decode_finds_on_the_full_ones(
    demo_model: Path, astronaut_bgr: np.ndarray
) -> None:
    # given the astronaut through the full graph and through the cut one
    ort = pytest.importorskip("onnxruntime")
    import onnx

    from edge_sdk.graph.ssd_split import SsdSplit

    full = onnx.load(str(demo_model))
    frame = np.ascontiguousarray(astronaut_bgr[np.newaxis, :, :, ::-1])
    sessions = [
        ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        for m in (full, SsdSplit().apply(full))
    ]
    full_outputs, cut_outputs = ({o.name: v[0] for o, v in zip(s.get_outputs(), s.run(None, {"image_tensor:0": frame}), strict=True)} for s in sessions)  # fmt: skip
    height, width = astronaut_bgr.shape[:2]
    frame_meta = FrameMeta("cam", 0, 0.0, width, height)
    geometry = InputGeometry.identity(width, height)
    spec = SsdSpec(type="ssd", score_threshold=0.3, labels=["person"])
    sdk = SsdPostprocessor(spec.model_copy(update={"decode": "sdk", "decode_model": demo_model}))

    # when
    expected = SsdPostprocessor(spec)(full_outputs, frame_meta, geometry).detections
    decoded = sdk(cut_outputs, frame_meta, geometry).detections
    read_as_is = sdk(full_outputs, frame_meta, geometry).detections

    # then
    assert len(expected) >= 1 and expected[0].label == "person", "the astronaut is found"
    assert [d.label for d in decoded] == [d.label for d in expected], "the same detections, in the same order"
    for want, got in zip(expected, decoded, strict=True):
        assert (got.x1, got.y1, got.x2, got.y2) == pytest.approx((want.x1, want.y1, want.x2, want.y2), abs=1e-3)
        assert got.score == pytest.approx(want.score, abs=1e-6)
    assert read_as_is == expected, "the uncut model's own detections are read as they are (e.g. a reference)"


def test_ssd_check_outputs_when_decode_is_sdk_accepts_the_cut_or_the_full_outputs_and_names_both_otherwise(
    demo_model: Path,
) -> None:
    # given
    post = SsdPostprocessor(SsdSpec(type="ssd", decode="sdk", decode_model=demo_model))
    cut = [TensorMeta(name, np.dtype(np.float32), ("N", 1917, 4)) for name in ("box_encodings", "class_scores")]
    full = [
        TensorMeta(name, np.dtype(np.float32), ("N",))
        for name in ("num_detections:0", "detection_boxes:0", "detection_scores:0", "detection_classes:0")
    ]

    # when / then: no error for either
    post.check_outputs(cut)
    post.check_outputs(full)
    with pytest.raises(ModelError, match="box_encodings and class_scores"):
        post.check_outputs([TensorMeta("logits", np.dtype(np.float32), ("N", 10))])
