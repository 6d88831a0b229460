"""The accuracy report and gate: what a user would notice when a candidate engine drifts from its reference."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime
import pytest

from edge_sdk.backends.calibration import TaskSpec
from edge_sdk.backends.calibration.setup import implied_task
from edge_sdk.backends.int8.accuracy import AccuracyGate, AccuracyReport, compare_outputs, run_samples
from edge_sdk.core.errors import ConfigError
from edge_sdk.core.tensor_meta import TensorMeta
from edge_sdk.postprocess.ssd import SsdSpec

CLASSIFICATION = TaskSpec(kind="classification")
SSD = SsdSpec(type="ssd", boxes="boxes", scores="scores", classes="classes", count=None, score_threshold=0.5)
DETECTION = TaskSpec(kind="detection", postprocess=SSD)


def logits(*top: int, classes: int = 4) -> list[dict[str, np.ndarray]]:
    """One [1, classes] logits output per sample, whose top-1 class is the given one."""
    outputs = []
    for index, winner in enumerate(top):
        row = np.linspace(0.0, 1.0, classes, dtype=np.float32) + index
        row[winner] = row.max() + 2.0
        outputs.append({"logits": row[np.newaxis]})
    return outputs


def detections(*boxes: tuple[float, float, float, float, float]) -> dict[str, np.ndarray]:
    """One frame of SSD outputs: (ymin, xmin, ymax, xmax, score) per box, class 1."""
    rows = np.array([b[:4] for b in boxes], np.float32).reshape(-1, 4)
    return {
        "boxes": rows[np.newaxis],
        "scores": np.array([[b[4] for b in boxes]], np.float32).reshape(1, -1),
        "classes": np.ones((1, len(boxes)), np.float32),
    }


def test_compare_outputs_when_outputs_are_equal_reports_no_drift_and_passes() -> None:
    outputs = logits(0, 1, 2)
    report = compare_outputs(outputs, outputs, CLASSIFICATION)
    assert report.top1_agreement == 1.0 and report.outputs[0].cosine == pytest.approx(1.0)
    assert report.outputs[0].max_abs_error == 0.0
    assert AccuracyGate(max_accuracy_drop=0.0, min_cosine=0.999).failures(report) == []


def test_compare_outputs_when_labels_are_given_reports_accuracy_of_both_engines() -> None:
    # Given a reference right on 4 of 4 samples and a candidate wrong on one
    reference, candidate = logits(0, 1, 2, 3), logits(0, 1, 2, 0)

    # When they are compared against the labels
    report = compare_outputs(reference, candidate, CLASSIFICATION, labels=np.array([0, 1, 2, 3]))

    # Then accuracy and agreement are both 75% for the candidate
    assert report.reference_accuracy == 1.0 and report.candidate_accuracy == 0.75
    assert report.top1_agreement == 0.75
    failures = AccuracyGate(max_accuracy_drop=1.0, min_cosine=0.0).failures(report, names=("FP32", "INT8"))
    assert failures == ["top-1 accuracy fell 25.00 points (100.00% FP32 -> 75.00% INT8), allowed 1.00"]


def test_gate_when_labels_are_absent_judges_top1_agreement() -> None:
    report = compare_outputs(logits(0, 1, 2, 3), logits(0, 1, 2, 0), CLASSIFICATION)
    assert report.reference_accuracy is None
    failures = AccuracyGate(max_accuracy_drop=10.0, min_cosine=0.0).failures(report)
    assert (
        len(failures) == 1
        and "top-1 agreement of candidate with reference is 75.00% (25.00 points lost)" in failures[0]
    )


def test_gate_when_an_output_drifts_names_it_with_measured_and_allowed_cosine() -> None:
    reference = [{"features": np.array([[1.0, 0.0]], np.float32)}]
    candidate = [{"features": np.array([[1.0, 1.0]], np.float32)}]
    report = compare_outputs(reference, candidate, TaskSpec())
    assert report.outputs[0].cosine == pytest.approx(np.sqrt(0.5))
    assert report.outputs[0].max_abs_error == 1.0 and report.outputs[0].mean_abs_error == 0.5
    assert AccuracyGate(max_accuracy_drop=1.0, min_cosine=0.99).failures(report) == [
        "output 'features' cosine similarity 0.707107 (candidate vs reference), allowed minimum 0.99"
    ]


def test_compare_outputs_when_detections_shift_a_little_matches_them_and_measures_score_drift() -> None:
    # Given two frames; the candidate moves a box slightly and scores it a bit lower
    reference = [detections((0.1, 0.1, 0.5, 0.5, 0.9)), detections((0.2, 0.2, 0.6, 0.7, 0.8))]
    candidate = [detections((0.11, 0.1, 0.5, 0.52, 0.85)), detections((0.2, 0.2, 0.6, 0.7, 0.8))]

    # When compared as detections
    report = compare_outputs(reference, candidate, DETECTION)

    # Then every box is matched and the score drift is the mean difference
    assert report.matched_boxes == 1.0 and (report.reference_boxes, report.candidate_boxes) == (2, 2)
    assert report.score_drift == pytest.approx(0.025, abs=1e-6)
    assert AccuracyGate(max_accuracy_drop=0.0, min_cosine=1.0).failures(report) == [], (
        "raw detection tensors are not judged by cosine (NMS order differs), only the boxes"
    )


def test_compare_outputs_when_a_box_is_lost_or_added_counts_it_against_the_candidate() -> None:
    reference = [detections((0.1, 0.1, 0.5, 0.5, 0.9), (0.6, 0.6, 0.9, 0.9, 0.8))]
    candidate = [detections((0.1, 0.1, 0.5, 0.5, 0.9), (0.0, 0.6, 0.3, 0.9, 0.7))]  # second box elsewhere
    report = compare_outputs(reference, candidate, DETECTION)
    assert report.matched_boxes == 0.5, "1 of the reference's 2 boxes was found"
    assert (report.matched_count, report.candidate_boxes, report.extra_boxes) == (1, 2, 1)
    failures = AccuracyGate(max_accuracy_drop=5.0, min_cosine=0.0).failures(report)
    assert failures == [
        "matched boxes 50.00%: candidate found 1 of reference's 2 boxes (50.00 points lost), allowed 5.00 (with 2 "
        "reference boxes one box is 50.00 points, more than the allowed drop: hold out more data, e.g. a longer "
        "video, for a gate that can resolve a 5-point drop)",
        "1 of candidate's 2 boxes are not in reference (50.00 points), allowed 5.00",
    ]


def test_the_gate_says_when_one_lost_box_is_more_than_the_allowed_drop() -> None:
    # given the shipped detector's held-out frames on the H200 host's CPU: 36 of FP32's 37 boxes found,
    # and a larger sample that lost 2 boxes of 200
    few = AccuracyReport(50, (), task="detection", matched_boxes=36 / 37, matched_count=36, reference_boxes=37)
    many = AccuracyReport(200, (), task="detection", matched_boxes=198 / 200, matched_count=198, reference_boxes=200)
    gate = AccuracyGate(max_accuracy_drop=1.0, min_cosine=0.0)
    # then both fail the 1-point gate, and only the small sample's failure says that one box (2.70
    # points) is more than the gate allows, so that it cannot pass anything but a perfect candidate
    [coarse], [fine] = gate.failures(few), gate.failures(many)
    assert "with 37 reference boxes one box is 2.70 points, more than the allowed drop" in coarse, coarse
    assert "one box is" not in fine, fine


def test_box_counts_read_as_one_sentence_whose_numbers_agree() -> None:
    # Given the reference finds 2 boxes, the candidate keeps 1 of them above the threshold and scores
    # the other within the margin under it (a user would still call it found)
    reference = [detections((0.1, 0.1, 0.5, 0.5, 0.9), (0.6, 0.6, 0.9, 0.9, 0.8))]
    candidate = [detections((0.1, 0.1, 0.5, 0.5, 0.9), (0.6, 0.6, 0.9, 0.9, 0.47))]

    report = compare_outputs(reference, candidate, DETECTION)

    # Then the sentence says what was counted, and its counts are the report's
    assert report.boxes_sentence(("FP32", "INT8")) == (
        "matched boxes 100.00%: of FP32's 2 boxes, INT8 found 2 (IoU >= 0.5, same class, score >= 0.45); "
        "INT8 had 1 boxes at score >= 0.5, 0 of them not in FP32"
    )
    assert AccuracyGate(max_accuracy_drop=0.0, min_cosine=1.0).failures(report) == []


def test_gate_when_the_candidate_adds_boxes_fails_on_the_extra_share() -> None:
    reference = [detections((0.1, 0.1, 0.5, 0.5, 0.9), (0.6, 0.6, 0.9, 0.9, 0.2))]
    candidate = [detections((0.1, 0.1, 0.5, 0.5, 0.9), (0.6, 0.6, 0.9, 0.9, 0.8))]  # 0.2 -> 0.8: a new box
    report = compare_outputs(reference, candidate, DETECTION)
    assert report.matched_boxes == 1.0 and report.extra_boxes == 1
    assert AccuracyGate(max_accuracy_drop=5.0, min_cosine=0.0).failures(report, ("FP32", "INT8")) == [
        "1 of INT8's 2 boxes are not in FP32 (50.00 points), allowed 5.00"
    ]


def test_compare_outputs_when_a_score_only_crosses_the_threshold_does_not_count_a_lost_box() -> None:
    reference = [detections((0.1, 0.1, 0.5, 0.5, 0.52))]
    candidate = [detections((0.1, 0.1, 0.5, 0.5, 0.49))]
    report = compare_outputs(reference, candidate, DETECTION)
    assert (report.reference_boxes, report.candidate_boxes) == (1, 0)
    assert report.matched_boxes == 1.0, "0.49 is within the score margin of the 0.5 threshold"


def test_compare_outputs_when_counts_differ_refuses_to_compare() -> None:
    with pytest.raises(ConfigError, match="expected the same number"):
        compare_outputs(logits(0, 1), logits(0), CLASSIFICATION)


def test_task_spec_when_detection_has_no_decoder_asks_for_one() -> None:
    with pytest.raises(ValueError, match="expected a postprocess spec"):
        TaskSpec(kind="detection")


def test_run_samples_when_given_an_onnxruntime_session_returns_outputs_by_name(tiny_models: dict[str, Path]) -> None:
    session = onnxruntime.InferenceSession(str(tiny_models["float_classifier"]), providers=["CPUExecutionProvider"])
    feeds = [{"images": np.zeros((1, 3, 8, 8), np.float32)} for _ in range(2)]
    outputs = run_samples(session, feeds)
    assert len(outputs) == 2 and outputs[0]["logits"].shape == (1, 4)
    np.testing.assert_allclose(outputs[0]["logits"][0], [0.0, 1.0, 2.0, 3.0], err_msg="zero images give the bias")


@pytest.mark.parametrize(
    "outputs",
    [
        [TensorMeta("last_hidden_state", np.dtype("float32"), (1, 197, 768))],
        [TensorMeta("x", np.dtype("float32"), (1, "seq", 512))],
    ],
    ids=["vit", "sequence"],
)
def test_a_model_whose_output_only_has_a_yolo_heads_rank_is_not_judged_as_a_detector(outputs: list[TensorMeta]) -> None:
    # given a transformer's outputs, which a YOLO head's shape test alone would take for one
    spec, why = implied_task(None, None, False, outputs)
    # then the gate compares its outputs (cosine), as for any model it cannot read
    assert spec.kind == "generic" and why == ""


def test_a_real_yolo_head_is_judged_as_a_detector() -> None:
    spec, why = implied_task(None, None, False, [TensorMeta("output0", np.dtype("float32"), (1, 22, 2100))])
    assert spec.kind == "detection" and "YOLOv8 head with 18 classes" in why
