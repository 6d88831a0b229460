"""Draw a result onto its frame."""

from __future__ import annotations

import numpy as np

from edge_sdk.core.opencv import import_cv2
from edge_sdk.core.results import Result

_COLOURS = [(56, 56, 255), (151, 157, 255), (31, 112, 255), (29, 178, 255), (49, 210, 207), (10, 249, 72)]


def draw_result(image: np.ndarray, result: Result) -> np.ndarray:
    """A copy of the BGR `image` with boxes, labels and top classes drawn on it."""
    cv2 = import_cv2()
    canvas = image.copy()
    thickness = max(1, round(min(canvas.shape[:2]) / 240))
    for det in result.detections:
        colour = _COLOURS[det.class_id % len(_COLOURS)]
        top_left, bottom_right = (int(det.x1), int(det.y1)), (int(det.x2), int(det.y2))
        cv2.rectangle(canvas, top_left, bottom_right, colour, thickness)
        caption = f"{det.label} {det.score:.2f}"
        (text_w, text_h), _ = cv2.getTextSize(caption, cv2.FONT_HERSHEY_SIMPLEX, 0.5, 1)
        y = max(text_h + 4, int(det.y1))
        cv2.rectangle(canvas, (int(det.x1), y - text_h - 4), (int(det.x1) + text_w + 4, y), colour, -1)
        cv2.putText(canvas, caption, (int(det.x1) + 2, y - 3), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (255, 255, 255), 1)
    for row, cls in enumerate(result.classifications):
        caption = f"{cls.label} {cls.score:.2f}"
        cv2.putText(canvas, caption, (8, 24 + 22 * row), cv2.FONT_HERSHEY_SIMPLEX, 0.6, (255, 255, 255), 2)
    return canvas
