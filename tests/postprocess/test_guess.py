"""Which post-processor a model's outputs get, from their names and shapes (postprocess/guess.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edge_sdk.core.errors import ModelError
from edge_sdk.core.tensor_meta import Dim, TensorMeta
from edge_sdk.postprocess.guess import UnrecognisedOutputs, guess_postprocess

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "yolo" / "nudenet_320n_astronaut.npz"


def meta(name: str, *shape: Dim, dtype: str = "float32") -> TensorMeta:
    return TensorMeta(name, np.dtype(dtype), tuple(shape))


def test_guess_when_given_the_real_yolov8n_output_shape_says_yolov8_with_its_18_classes() -> None:
    # given the shape of nudenet's real YOLOv8n head (tests/fixtures/yolo)
    with np.load(FIXTURE) as data:
        head = data["output0"]
    assert head.shape == (1, 22, 2100)
    # when
    guess = guess_postprocess([meta("output0", *head.shape)], input_size=(320, 320))
    # then
    assert guess.spec.type == "yolo" and guess.spec.version == "v8" and guess.spec.output == "output0"
    assert guess.summary == "outputs look like a YOLOv8 head with 18 classes"


def test_guess_when_the_v8_head_has_a_dynamic_anchor_axis_reads_the_classes_from_the_fixed_axis() -> None:
    guess = guess_postprocess([meta("output0", "batch", 84, "anchors")])
    assert (guess.family, guess.summary) == ("yolov8", "outputs look like a YOLOv8 head with 80 classes")


def test_guess_when_given_a_yolov5_head_says_v5_with_objectness() -> None:
    # given YOLOv5s' COCO export: [1, 25200, 85] = 3 anchors per cell at strides 8/16/32 of 640
    guess = guess_postprocess([meta("output0", 1, 25200, 85)], input_size=(640, 640))
    assert guess.spec.type == "yolo" and guess.spec.version == "v5"
    assert guess.summary == "outputs look like a YOLOv5 head with 80 classes"


def test_guess_when_a_transposed_v8_head_has_v8s_anchor_count_says_v8_not_v5() -> None:
    # given [1, 8400, 84]: one anchor per cell of 640 at strides 8/16/32, values last
    guess = guess_postprocess([meta("output0", 1, 8400, 84)], input_size=(640, 640))
    assert guess.spec.type == "yolo" and guess.spec.version == "v8"
    assert "80 classes" in guess.summary and "transposed" in guess.summary


def test_guess_when_the_labels_count_fits_v8_settles_a_values_last_head_and_keeps_the_labels() -> None:
    labels = [f"c{i}" for i in range(3)]
    guess = guess_postprocess([meta("out", 1, 500, 7)], labels=labels)
    assert guess.spec.type == "yolo" and guess.spec.version == "v8" and guess.spec.labels == labels


def test_guess_when_the_labels_do_not_fit_the_class_count_drops_them() -> None:
    guess = guess_postprocess([meta("output0", 1, 22, 2100)], labels=["only", "two"])
    assert guess.spec.type == "yolo" and guess.spec.labels == []


def test_guess_when_given_the_tf_object_detection_api_outputs_says_ssd_with_its_defaults() -> None:
    outputs = [
        meta("num_detections:0", "n"),
        meta("detection_boxes:0", "n", 100, 4),
        meta("detection_scores:0", "n", 100),
        meta("detection_classes:0", "n", 100),
    ]
    guess = guess_postprocess(outputs, labels=["person"])
    assert guess.spec.type == "ssd" and guess.spec.boxes == "detection_boxes:0"
    assert guess.spec.labels == ["person"]


def test_guess_when_ssd_outputs_have_other_names_finds_them_by_what_the_names_say() -> None:
    outputs = [meta("boxes", 1, 50, 4), meta("scores", 1, 50), meta("labels", 1, 50), meta("num", 1)]
    guess = guess_postprocess(outputs)
    assert guess.spec.type == "ssd"
    assert (guess.spec.boxes, guess.spec.scores, guess.spec.classes, guess.spec.count) == (
        "boxes",
        "scores",
        "labels",
        "num",
    )


def test_guess_when_given_one_score_vector_says_classifier_with_softmax_unless_it_ends_in_softmax() -> None:
    logits = guess_postprocess([meta("logits", "N", 1000)])
    probabilities = guess_postprocess([meta("prob", 1, 1000)], produced_by={"prob": "Softmax"})
    assert logits.spec.type == "classification" and logits.spec.softmax is True and logits.spec.top_k == 5
    assert probabilities.spec.type == "classification" and probabilities.spec.softmax is False
    assert logits.summary == "outputs look like a classifier with 1000 classes (logits, softmax applied)"


@pytest.mark.parametrize(
    "outputs",
    [
        [meta("features", 1, 256, 20, 20)],  # a backbone's feature map
        [meta("mask", 1, 1), meta("depth", 1, 64, 64)],  # several outputs of no known family
        [meta("score", 1, 1)],  # one value: nothing to rank
    ],
    ids=["feature-map", "mixed", "single-value"],
)
def test_guess_when_the_outputs_fit_no_family_says_what_it_found_and_points_to_the_guide(
    outputs: list[TensorMeta],
) -> None:
    with pytest.raises(UnrecognisedOutputs) as raised:
        guess_postprocess(outputs)
    message = str(raised.value)
    assert isinstance(raised.value, ModelError), "the CLI prints a ModelError as one error and exits 2"
    for output in outputs:
        assert output.name in message, f"the message names every output: {message}"
    assert "docs/models.md" in message and "edge-sdk run" in message
    assert "[1, 256, 20, 20]" in message or "[1, 1]" in message, message


@pytest.mark.parametrize(
    ("shape", "exact"),
    [
        ((1, 22, 2100), True),  # YOLOv8n at 320: 2100 cells
        ((1, 25200, 85), True),  # YOLOv5s at 640: 3 x 8400
        ((1, 84, 8400), True),  # YOLOv8 at 640
        ((1, 84, 3360), True),  # YOLOv8 at 640x256 (not square): 21 x (640/32) x (256/32) cells
        ((1, 102000, 85), True),  # YOLOv5 P6 at 1280: 3 x 34000 cells over strides 8..64
        ((1, 197, 768), False),  # a ViT's last hidden state: a head's rank, not its grid
        ((1, 84, "anchors"), False),  # dynamic: nothing to check the grid against
    ],
)
def test_a_yolo_guess_is_exact_only_when_the_anchor_count_is_a_yolo_grids(shape: tuple[Dim, ...], exact: bool) -> None:
    guess = guess_postprocess([meta("output0", *shape)])
    assert guess.spec.type == "yolo" and guess.exact is exact
