"""Non-maximum suppression: OpenCV's where it keeps sub-pixel coordinates, else a short numpy version.

OpenCV has `cv2.dnn.NMSBoxes` since 3.4 and `NMSBoxesBatched` (per class) since 4.7, and both in 5.x.
Python bindings of some 4.x releases only reached the integer `Rect` overload and truncated float
boxes; a one-off probe finds that out, and such builds (and builds without the dnn module) get the
numpy version, which computes the same thing.
"""

from __future__ import annotations

import functools
import logging
from types import ModuleType

import numpy as np

from edge_sdk.core.errors import BackendUnavailableError
from edge_sdk.core.opencv import import_cv2

log = logging.getLogger(__name__)

_FIRST_WINDOW = 1024
"""Boxes the first NMS round looks at (at least); typical frames have fewer candidates than this."""


def nms(
    boxes: np.ndarray, scores: np.ndarray, class_ids: np.ndarray | None, iou_threshold: float, limit: int
) -> np.ndarray:
    """Indices of the boxes to keep, best score first, at most `limit` of them.

    `boxes` are [K, 4] x1, y1, x2, y2; a box suppresses lower-scoring boxes whose IoU with it is above
    `iou_threshold`: only boxes of its own class, unless `class_ids` is None (class-agnostic).
    """
    if len(boxes) == 0:
        return np.zeros(0, dtype=np.intp)
    scores = np.asarray(scores, dtype=np.float32)
    order = np.argsort(-scores, kind="stable")
    boxes, scores = np.asarray(boxes, dtype=np.float64)[order], scores[order]
    class_ids = None if class_ids is None else np.asarray(class_ids)[order]
    # Greedy NMS judges a box by the better boxes only, so the best `take` boxes keep exactly what
    # they would keep among all of them: widen the window only while fewer than `limit` survive.
    # This bounds the work when a low threshold lets thousands of anchors through.
    take = max(4 * limit, _FIRST_WINDOW)
    while True:
        keep = _suppress(boxes[:take], scores[:take], None if class_ids is None else class_ids[:take], iou_threshold)
        if len(keep) >= limit or take >= len(boxes):
            return order[keep[:limit]]
        take *= 4


def _suppress(boxes: np.ndarray, scores: np.ndarray, class_ids: np.ndarray | None, iou_threshold: float) -> np.ndarray:
    """Kept indices into boxes sorted best first, in that order (OpenCV's sort is stable)."""
    dnn = _opencv_dnn()
    if dnn is None:
        return numpy_nms(boxes, scores, class_ids, iou_threshold)
    xywh = np.concatenate([boxes[:, :2], boxes[:, 2:] - boxes[:, :2]], axis=1)
    if class_ids is None:
        found = dnn.NMSBoxes(xywh, scores, 0.0, iou_threshold)
    elif hasattr(dnn, "NMSBoxesBatched"):
        found = dnn.NMSBoxesBatched(xywh, scores, class_ids.astype(np.int32), 0.0, iou_threshold)
    else:
        shifted = _offset_by_class(boxes, class_ids)
        found = dnn.NMSBoxes(np.concatenate([shifted[:, :2], xywh[:, 2:]], axis=1), scores, 0.0, iou_threshold)
    return np.sort(np.asarray(found, dtype=np.intp).reshape(-1))


def _offset_by_class(boxes: np.ndarray, class_ids: np.ndarray | None) -> np.ndarray:
    """Move each class to its own region so that boxes of different classes never overlap."""
    if class_ids is None:
        return boxes
    step = float(boxes.max() - boxes.min()) + 1.0
    return boxes + (class_ids.astype(np.float64) * step)[:, np.newaxis]


def numpy_nms(boxes: np.ndarray, scores: np.ndarray, class_ids: np.ndarray | None, iou_threshold: float) -> np.ndarray:
    """The fallback: greedy NMS, best box first, dropping the boxes that overlap it above the threshold."""
    boxes = _offset_by_class(np.asarray(boxes, dtype=np.float64), class_ids)
    x1, y1, x2, y2 = boxes.T
    areas = (x2 - x1) * (y2 - y1)
    order = np.argsort(-scores, kind="stable")
    keep = []
    while order.size:
        best, rest = order[0], order[1:]
        keep.append(best)
        width = np.clip(np.minimum(x2[best], x2[rest]) - np.maximum(x1[best], x1[rest]), 0.0, None)
        height = np.clip(np.minimum(y2[best], y2[rest]) - np.maximum(y1[best], y1[rest]), 0.0, None)
        inter = width * height
        union = areas[best] + areas[rest] - inter
        # Two empty boxes count as identical, as in OpenCV.
        iou = np.divide(inter, union, out=np.ones_like(inter), where=union > 0)
        order = rest[iou <= iou_threshold]
    return np.asarray(keep, dtype=np.intp)


@functools.cache
def _opencv_dnn() -> ModuleType | None:
    """cv2.dnn when its NMS works on float boxes; None (use numpy) otherwise."""
    try:
        cv2 = import_cv2()
    except BackendUnavailableError:
        log.info("OpenCV is not installed; NMS runs in numpy")
        return None
    dnn = getattr(cv2, "dnn", None)
    if dnn is None or not hasattr(dnn, "NMSBoxes"):
        log.info("this OpenCV %s has no dnn.NMSBoxes; NMS runs in numpy", cv2.__version__)
        return None
    # IoU 0.37 as floats, 1.0 once truncated to integers: a truncating binding keeps one box.
    probe = dnn.NMSBoxes(
        np.array([[0.0, 0.0, 1.9, 1.9], [0.5, 0.5, 1.9, 1.9]]), np.array([0.9, 0.8], np.float32), 0.0, 0.5
    )
    if np.asarray(probe).size != 2:
        log.info("OpenCV %s truncates NMS boxes to integers; NMS runs in numpy", cv2.__version__)
        return None
    module: ModuleType = dnn
    return module
