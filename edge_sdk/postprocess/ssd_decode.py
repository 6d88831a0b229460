"""The host half of a split SSD detector: TF's box decoder and per-class NMS, in numpy.

`SsdDecoder` does what a TensorFlow Object Detection API SSD graph's own post-processing does
(`edge_sdk.graph.ssd_head` reads its settings from the graph), on the raw box encodings and class
scores of one frame that the cut graph (`edge_sdk.graph.ssd_split`) outputs. The box arithmetic runs
in float32 in the graph's order of operations, so boxes come out as the graph's to the last bits (up
to exp()'s rounding). Only boxes that can survive are decoded: those scoring above the graph's NMS
threshold and at least `min_score` (a box below `min_score` cannot change which better boxes NMS
keeps, since a box is suppressed only by better ones, and so need not be decoded at all).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from edge_sdk.core.errors import ModelError

from .nms import nms

if TYPE_CHECKING:  # the graph package imports onnx, which a pipeline that never splits need not load
    from edge_sdk.graph.ssd_decoding import SsdDecoding

BOX_ENCODINGS = "box_encodings"
"""The cut engine's outputs: the names edge_sdk.graph.ssd_split gives them (a test keeps them equal)."""
CLASS_SCORES = "class_scores"

_HALF = np.float32(0.5)


@dataclass(frozen=True)
class SsdBoxes:
    """One frame's detections, best first: corners normalised to the model input."""

    boxes: np.ndarray
    """[K, 4] float32 ymin, xmin, ymax, xmax."""
    scores: np.ndarray
    """[K] float32."""
    classes: np.ndarray
    """[K] int: the 0-based index of the class among the score columns."""


class SsdDecoder:
    """Decode + NMS for one frame at a time, as the graph's post-processing does it."""

    def __init__(self, decoding: SsdDecoding):
        self.decoding = decoding
        anchors = np.asarray(decoding.anchors, np.float32)
        # get_center_coordinates_and_sizes, in the graph's order: size = max - min, centre = min + size / 2.
        self._anchor_h = anchors[:, 2] - anchors[:, 0]
        self._anchor_w = anchors[:, 3] - anchors[:, 1]
        self._anchor_y = anchors[:, 0] + self._anchor_h * _HALF
        self._anchor_x = anchors[:, 1] + self._anchor_w * _HALF
        self._multipliers = np.asarray(decoding.multipliers, np.float32)

    def __call__(self, box_encodings: np.ndarray, class_scores: np.ndarray, min_score: float = 0.0) -> SsdBoxes:
        """`box_encodings` [A, 4] and `class_scores` [A, C] of one frame -> its detections scoring at least
        `min_score`, at most the graph's max_total, best first."""
        decoding = self.decoding
        encodings = np.asarray(box_encodings, np.float32)
        scores = np.asarray(class_scores, np.float32)
        anchors = len(self._anchor_h)
        if encodings.shape != (anchors, 4) or scores.ndim != 2 or scores.shape[0] != anchors:
            raise ModelError(
                f"expected box encodings [{anchors}, 4] and class scores [{anchors}, classes] for one frame "
                f"(the graph has {anchors} anchors), got {encodings.shape} and {scores.shape}"
            )
        candidate = (scores > np.float32(decoding.score_threshold)) & (scores >= np.float32(min_score))
        rows, classes = np.nonzero(candidate)
        if rows.size == 0:
            return _empty()
        boxes = self._decode(encodings, rows)
        picked = self._suppress(boxes, scores[rows, classes], classes)
        boxes, kept_scores, classes = boxes[picked], scores[rows[picked], classes[picked]], classes[picked]
        return self._clip_and_limit(boxes, kept_scores, classes)

    def graph_outputs(self, box_encodings: np.ndarray, class_scores: np.ndarray) -> dict[str, np.ndarray]:
        """What the uncut graph outputs for this frame, under its own output names, as a batch of one:
        the count, boxes, scores and classes (index + the graph's class id offset), padded to max_total."""
        found = self(box_encodings, class_scores)
        size = self.decoding.max_total
        count = len(found.scores)
        boxes = np.zeros((1, size, 4), np.float32)
        scores = np.zeros((1, size), np.float32)
        classes = np.zeros((1, size), np.float32)
        boxes[0, :count], scores[0, :count] = found.boxes, found.scores
        classes[0, :count] = found.classes.astype(np.float32) + np.float32(self.decoding.class_id_offset)
        names = self.decoding.output_names
        values = {
            "num_detections": np.array([count], np.float32),
            "detection_boxes": boxes,
            "detection_scores": scores,
            "detection_classes": classes,
        }
        return {names.get(role, role): value for role, value in values.items()}

    def _decode(self, encodings: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """FasterRcnnBoxCoder.decode for the anchors `rows`, in the graph's float32 operations."""
        ty, tx, th, tw = (encodings[rows] * self._multipliers).T
        anchor_h, anchor_w = self._anchor_h[rows], self._anchor_w[rows]
        half_h = np.exp(th) * anchor_h * _HALF
        half_w = np.exp(tw) * anchor_w * _HALF
        centre_y = ty * anchor_h + self._anchor_y[rows]
        centre_x = tx * anchor_w + self._anchor_x[rows]
        return np.stack([centre_y - half_h, centre_x - half_w, centre_y + half_h, centre_x + half_w], axis=1)

    def _suppress(self, boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray) -> np.ndarray:
        """Indices kept by per-class NMS, each class limited to max_per_class, best first overall."""
        decoding = self.decoding
        corners = boxes[:, [1, 0, 3, 2]]  # nms() takes x1, y1, x2, y2; IoU does not care which axis is which
        kept = []
        for class_id in np.unique(classes):
            members = np.flatnonzero(classes == class_id)
            chosen = nms(corners[members], scores[members], None, decoding.iou_threshold, decoding.max_per_class)
            kept.append(members[chosen])
        picked = np.concatenate(kept)
        return picked[np.argsort(-scores[picked], kind="stable")]

    def _clip_and_limit(self, boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray) -> SsdBoxes:
        """clip_to_window (dropping boxes left with no area), then the best max_total."""
        y_min, x_min, y_max, x_max = (np.float32(v) for v in self.decoding.clip_window)
        clipped = np.empty_like(boxes)
        clipped[:, 0] = np.maximum(np.minimum(boxes[:, 0], y_max), y_min)
        clipped[:, 1] = np.maximum(np.minimum(boxes[:, 1], x_max), x_min)
        clipped[:, 2] = np.maximum(np.minimum(boxes[:, 2], y_max), y_min)
        clipped[:, 3] = np.maximum(np.minimum(boxes[:, 3], x_max), x_min)
        area = (clipped[:, 2] - clipped[:, 0]) * (clipped[:, 3] - clipped[:, 1])
        keep = np.flatnonzero(area > 0)[: self.decoding.max_total]
        return SsdBoxes(clipped[keep], scores[keep], classes[keep])


def _empty() -> SsdBoxes:
    return SsdBoxes(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.intp))
