"""SsdDecoder: the host decode + NMS of a split SSD graph, against hand-computed boxes and against the
uncut graph's own post-processing on real frames."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import pytest

from edge_sdk.core.errors import ModelError
from edge_sdk.core.opencv import import_cv2
from edge_sdk.graph import ssd_split
from edge_sdk.graph.ssd_decoding import SsdDecoding
from edge_sdk.graph.ssd_head import find_ssd_head
from edge_sdk.graph.ssd_split import SsdSplit
from edge_sdk.postprocess import ssd_decode
from edge_sdk.postprocess.ssd_decode import SsdDecoder
from edge_sdk.sources.synthetic import PanZoomSource

ort = pytest.importorskip("onnxruntime")

ASTRONAUT = Path(__file__).resolve().parents[2] / "tools" / "assets" / "astronaut.jpg"


def decoding(anchors: list[list[float]], **changes: object) -> SsdDecoding:
    """TF's defaults: scales 10, 10, 5, 5, NMS IoU 0.6, 100 boxes, the whole image as clip window."""
    settings: dict[str, object] = {
        "anchors": np.asarray(anchors, np.float32),
        "scale_factors": (10.0, 10.0, 5.0, 5.0),
        "multipliers": (0.1, 0.1, 0.2, 0.2),
        "score_threshold": 1e-8,
        "iou_threshold": 0.6,
        "max_per_class": 100,
        "max_total": 100,
        "clip_window": (0.0, 0.0, 1.0, 1.0),
        "class_id_offset": 1.0,
    }
    return SsdDecoding(**(settings | changes))  # type: ignore[arg-type]


def test_ssd_decoder_when_given_one_encoding_decodes_it_against_its_anchor_with_the_scale_factors() -> None:
    # given an anchor with centre (0.4, 0.3) and size (0.4, 0.2), and an encoding that moves the centre
    # by (+0.1, -0.2) anchor sizes and doubles the height: ty = 0.1 * 10, tx = -0.2 * 10, th = ln 2 * 5
    decoder = SsdDecoder(decoding([[0.2, 0.2, 0.6, 0.4]]))
    encodings = np.array([[1.0, -2.0, math.log(2.0) * 5.0, 0.0]], np.float32)

    # when
    found = decoder(encodings, np.array([[0.9]], np.float32))

    # then centre (0.44, 0.26), size (0.8, 0.2)
    np.testing.assert_allclose(found.boxes, [[0.04, 0.16, 0.84, 0.36]], atol=1e-6, err_msg="ymin, xmin, ymax, xmax")
    assert found.scores.tolist() == pytest.approx([0.9]) and found.classes.tolist() == [0]


def test_ssd_decoder_when_boxes_overlap_suppresses_within_a_class_only_above_the_iou_threshold() -> None:
    # given three boxes of class 0: b overlaps a by IoU 0.8, c overlaps a by IoU 0.5; and d = a in class 1
    anchors = [[0.0, 0.0, 0.5, 0.5], [0.0, 0.0, 0.5, 0.4], [0.0, 0.0, 0.5, 0.25], [0.0, 0.0, 0.5, 0.5]]
    scores = np.array([[0.9, 0.0], [0.8, 0.0], [0.7, 0.0], [0.0, 0.6]], np.float32)
    decoder = SsdDecoder(decoding(anchors))

    # when
    found = decoder(np.zeros((4, 4), np.float32), scores)

    # then
    assert found.scores.tolist() == pytest.approx([0.9, 0.7, 0.6]), "b is suppressed by a; c and d are not"
    assert found.classes.tolist() == [0, 0, 1], "a box never suppresses another class's box"


def test_ssd_decoder_when_limits_apply_keeps_the_best_per_class_then_in_total() -> None:
    # given five disjoint boxes of class 0 and two of class 1
    anchors = [[0.1 * i, 0.0, 0.1 * i + 0.05, 0.05] for i in range(7)]
    scores = np.zeros((7, 2), np.float32)
    scores[:5, 0] = [0.9, 0.8, 0.7, 0.6, 0.5]
    scores[5:, 1] = [0.85, 0.75]
    decoder = SsdDecoder(decoding(anchors, max_per_class=3, max_total=4))

    # when
    found = decoder(np.zeros((7, 4), np.float32), scores)

    # then
    assert found.scores.tolist() == pytest.approx([0.9, 0.85, 0.8, 0.75]), "3 per class, then the best 4 overall"


def test_ssd_decoder_when_boxes_leave_the_window_clips_them_and_drops_those_left_without_area() -> None:
    # given a box straddling the right edge and a box entirely outside the image
    decoder = SsdDecoder(decoding([[0.2, 0.8, 0.4, 1.2], [1.1, 1.1, 1.3, 1.3]]))

    # when
    found = decoder(np.zeros((2, 4), np.float32), np.array([[0.9], [0.8]], np.float32))

    # then
    np.testing.assert_allclose(found.boxes, [[0.2, 0.8, 0.4, 1.0]], atol=1e-6, err_msg="clipped to the window")
    assert found.scores.tolist() == pytest.approx([0.9]), "a box with no area inside the window is dropped"


def test_ssd_decoder_when_min_score_is_set_keeps_exactly_the_full_result_at_or_above_it() -> None:
    # given many random overlapping boxes
    rng = np.random.default_rng(7)
    centres = rng.uniform(0.2, 0.8, (300, 2))
    anchors = np.concatenate([centres - 0.1, centres + 0.1], axis=1)[:, [0, 1, 2, 3]].tolist()
    encodings = rng.normal(0.0, 1.0, (300, 4)).astype(np.float32)
    scores = rng.uniform(0.0, 1.0, (300, 2)).astype(np.float32)
    decoder = SsdDecoder(decoding(anchors))

    # when
    everything = decoder(encodings, scores)
    some = decoder(encodings, scores, min_score=0.5)

    # then
    keep = everything.scores >= 0.5
    np.testing.assert_array_equal(some.boxes, everything.boxes[keep], "below min_score nothing can change NMS")
    np.testing.assert_array_equal(some.scores, everything.scores[keep])


def test_ssd_decoder_when_shapes_do_not_match_the_anchors_raises_model_error() -> None:
    # given
    decoder = SsdDecoder(decoding([[0.0, 0.0, 1.0, 1.0]]))

    # when / then
    with pytest.raises(ModelError, match=r"expected box encodings \[1, 4\]"):
        decoder(np.zeros((2, 4), np.float32), np.zeros((2, 1), np.float32))


@pytest.fixture(scope="module")
def graphs(demo_model: Path) -> tuple[ort.InferenceSession, ort.InferenceSession, SsdDecoder]:
    full = onnx.load(str(demo_model))
    cut = SsdSplit().apply(full)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    sessions = [
        ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        for model in (full, cut)
    ]
    return sessions[0], sessions[1], SsdDecoder(find_ssd_head(full).decoding)


def test_ssd_decoder_when_fed_the_cut_graph_gives_the_uncut_graphs_outputs_on_real_frames(
    graphs: tuple[ort.InferenceSession, ort.InferenceSession, SsdDecoder],
) -> None:
    # given 12 frames of the virtual camera (the person moves, scales and leaves the frame)
    full, cut, decoder = graphs
    cv2 = import_cv2()
    with PanZoomSource(ASTRONAUT, frames=12, size=(640, 480)) as source:
        frames = [cv2.cvtColor(cv2.resize(f.image, (300, 300)), cv2.COLOR_BGR2RGB)[np.newaxis] for f in source]
    boxes_compared = 0

    for index, frame in enumerate(frames):
        # when
        count, boxes, scores, classes = full.run(None, {"image_tensor:0": frame})
        encodings, class_scores = cut.run(None, {"image_tensor:0": frame})
        decoded = decoder.graph_outputs(encodings[0], class_scores[0])

        # then: every one of the (up to) 100 detections, down to scores of 1e-8
        assert decoded["num_detections:0"][0] == count[0], f"frame {index}: the same number of detections"
        n = int(count[0])
        np.testing.assert_allclose(
            decoded["detection_boxes:0"][0, :n], boxes[0, :n], atol=2e-6, err_msg=f"frame {index}"
        )
        np.testing.assert_array_equal(decoded["detection_scores:0"][0, :n], scores[0, :n], f"frame {index}: scores")
        np.testing.assert_array_equal(decoded["detection_classes:0"], classes, f"frame {index}: classes (1 = person)")
        boxes_compared += n
    assert boxes_compared > 1000, "the frames exercise NMS on many candidates"


def test_ssd_decoder_output_names_are_the_ones_the_split_graph_writes() -> None:
    # then
    assert (ssd_decode.BOX_ENCODINGS, ssd_decode.CLASS_SCORES) == (ssd_split.BOX_ENCODINGS, ssd_split.CLASS_SCORES), (
        "edge_sdk.postprocess keeps its own copy of the names so that it need not import onnx"
    )
