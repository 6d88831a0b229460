"""NMS: OpenCV's where usable, and the numpy fallback that must agree with it."""

from __future__ import annotations

import numpy as np
import pytest

from edge_sdk.postprocess.nms import nms, numpy_nms


def random_boxes(seed: int, count: int = 200) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Crowded sub-pixel boxes in a 320x320 input, with scores and three classes."""
    rng = np.random.default_rng(seed)
    corner = rng.uniform(0, 280, size=(count, 2))
    size = rng.uniform(5, 60, size=(count, 2))
    boxes = np.concatenate([corner, corner + size], axis=1).astype(np.float32)
    return boxes, rng.uniform(0.3, 1.0, size=count).astype(np.float32), rng.integers(0, 3, size=count)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("per_class", [True, False])
def test_numpy_nms_when_given_crowded_boxes_keeps_what_opencv_keeps(seed: int, per_class: bool) -> None:
    # given
    boxes, scores, classes = random_boxes(seed)
    class_ids = classes if per_class else None

    # when
    with_opencv = nms(boxes, scores, class_ids, 0.45, limit=1000)
    with_numpy = numpy_nms(boxes, scores, class_ids, 0.45)

    # then
    assert 10 < len(with_opencv) < len(boxes), "the crowd is thinned, not emptied"
    assert with_numpy.tolist() == with_opencv.tolist(), (
        "the fallback keeps the same boxes, best first, as OpenCV's NMS (the fallback must not change results)"
    )


def test_nms_when_boxes_are_sub_pixel_does_not_round_them() -> None:
    # given two small boxes with IoU 0.37 as floats (1.0 if truncated to whole pixels)
    boxes = np.array([[0.0, 0.0, 1.9, 1.9], [0.5, 0.5, 2.4, 2.4]], dtype=np.float32)

    # when
    keep = nms(boxes, np.array([0.9, 0.8], np.float32), None, 0.5, limit=10)

    # then
    assert keep.tolist() == [0, 1], "coordinates keep their fractions, so neither box suppresses the other"


def test_nms_when_limit_is_below_the_survivors_returns_the_best_ones() -> None:
    # given four separate boxes
    boxes = np.array([[i * 10, 0, i * 10 + 5, 5] for i in range(4)], dtype=np.float32)
    scores = np.array([0.2, 0.9, 0.5, 0.7], np.float32)

    # when
    keep = nms(boxes, scores, None, 0.5, limit=2)

    # then
    assert keep.tolist() == [1, 3], "limit keeps that many boxes, best score first"


def test_nms_when_there_are_no_boxes_returns_no_indices() -> None:
    # given / when
    keep = nms(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int64), 0.5, limit=10)

    # then
    assert keep.shape == (0,), "nothing in, nothing kept"


def test_nms_when_thousands_of_boxes_survive_returns_the_same_best_boxes_as_a_full_pass() -> None:
    # given 6000 small boxes scattered so that most survive, and a limit of 50
    rng = np.random.default_rng(5)
    corner = rng.uniform(0, 2000, size=(6000, 2))
    boxes = np.concatenate([corner, corner + 8], axis=1)
    scores = rng.uniform(0.3, 1.0, size=6000).astype(np.float32)
    classes = rng.integers(0, 80, size=6000)

    # when
    keep = nms(boxes, scores, classes, 0.45, limit=50)

    # then
    assert keep.tolist() == numpy_nms(boxes, scores, classes, 0.45)[:50].tolist(), (
        "looking at the best boxes first changes nothing: the 50 kept are those a full NMS keeps first"
    )


def test_nms_when_the_best_boxes_all_overlap_looks_further_down_for_the_rest() -> None:
    # given 3000 near-identical top-scoring boxes on one spot, then 100 separate weaker boxes
    rng = np.random.default_rng(6)
    pile = np.array([100.0, 100.0, 150.0, 150.0]) + rng.uniform(0, 1, size=(3000, 1))
    spread = np.array([[300.0 + 20 * i, 300.0, 310.0 + 20 * i, 310.0] for i in range(100)])
    boxes = np.concatenate([pile, spread])
    scores = np.concatenate([rng.uniform(0.8, 0.9, 3000), rng.uniform(0.3, 0.5, 100)]).astype(np.float32)

    # when
    keep = nms(boxes, scores, None, 0.45, limit=50)

    # then
    assert len(keep) == 50, "one box survives from the pile, and the limit is filled from the weaker boxes past it"
    assert keep.tolist() == numpy_nms(boxes, scores, None, 0.45)[:50].tolist(), "the same boxes as a full NMS pass"
