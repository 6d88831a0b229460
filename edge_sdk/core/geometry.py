"""Where a frame lands inside the model input, so boxes can be mapped back to the frame."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class InputGeometry:
    """How a frame was placed into the model input: input = frame * scale + pad (per axis, in pixels)."""

    input_width: int
    input_height: int
    scale_x: float = 1.0
    scale_y: float = 1.0
    pad_x: float = 0.0
    pad_y: float = 0.0

    @classmethod
    def identity(cls, width: int, height: int) -> InputGeometry:
        return cls(width, height)

    def to_frame(self, boxes: np.ndarray) -> np.ndarray:
        """Map [..., 4] x1, y1, x2, y2 boxes from model-input pixels to frame pixels."""
        out = np.asarray(boxes, dtype=np.float32).copy()
        out[..., [0, 2]] = (out[..., [0, 2]] - self.pad_x) / self.scale_x
        out[..., [1, 3]] = (out[..., [1, 3]] - self.pad_y) / self.scale_y
        return out
