"""What a TensorFlow Object Detection API SSD graph's post-processing does with its raw box head:
the parameters `ssd_head` reads from the graph and the host decoder (postprocess/ssd_decode.py) applies."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True, eq=False)
class SsdDecoding:
    """What the graph's post-processing does with the raw head, in normalised model-input units.

    Box i of the raw head decodes against anchor i (TF's FasterRcnnBoxCoder): with the anchor's
    centre (ya, xa) and size (ha, wa), centre = (ty / sy * ha + ya, tx / sx * wa + xa) and size =
    (exp(th / sh) * ha, exp(tw / sw) * wa). Then, per class, NMS keeps boxes scoring above
    `score_threshold` that overlap a better box of their class by no more than `iou_threshold`, at most
    `max_per_class` of them; all classes together are sorted by score, clipped to `clip_window`, boxes
    left with no area dropped, and the best `max_total` kept.
    """

    anchors: np.ndarray
    """[A, 4] float32 ymin, xmin, ymax, xmax."""
    scale_factors: tuple[float, float, float, float]
    """sy, sx, sh, sw as the graph divides by them (TF's defaults are 10, 10, 5, 5)."""
    multipliers: tuple[float, float, float, float]
    """The float32 constants the graph multiplies the encodings by (1 / scale factor, as TF folded them)."""
    score_threshold: float
    iou_threshold: float
    max_per_class: int
    max_total: int
    clip_window: tuple[float, float, float, float]
    """ymin, xmin, ymax, xmax."""
    class_id_offset: float
    """Added to the 0-based class index in the graph's class output (TF's label_id_offset, 1)."""
    output_names: dict[str, str] = field(default_factory=dict)
    """The graph's own outputs by role: num_detections, detection_boxes, detection_scores, detection_classes."""

    def describe(self) -> str:
        scales = ", ".join(f"{s:g}" for s in self.scale_factors)
        return (
            f"{len(self.anchors)} anchors, box scales {scales}, score > {self.score_threshold:g}, "
            f"IoU {self.iou_threshold:g}, {self.max_per_class} per class, {self.max_total} in total"
        )
