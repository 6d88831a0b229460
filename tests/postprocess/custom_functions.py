"""User post-processing functions, as a pipeline file would name them ('tests.postprocess.custom_functions:...')."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from edge_sdk.core.geometry import InputGeometry
from edge_sdk.core.results import Classification, Detection, FrameMeta, Result

NOT_A_FUNCTION = 42


def brightest_quadrant(outputs: Mapping[str, np.ndarray], frame: FrameMeta, geometry: InputGeometry) -> Result:
    """Classifies the frame by which of four scores in output 'quadrants' is highest."""
    scores = outputs["quadrants"]
    best = int(np.argmax(scores))
    return Result(frame=frame, classifications=(Classification(best, f"quadrant{best}", float(scores[best])),))


def box_from_output(outputs: Mapping[str, np.ndarray], frame: FrameMeta, geometry: InputGeometry) -> list[Detection]:
    """One detection from output 'box' (x1, y1, x2, y2, score in model-input pixels), mapped to the frame."""
    x1, y1, x2, y2 = geometry.to_frame(outputs["box"][:4]).tolist()
    return [Detection(x1, y1, x2, y2, float(outputs["box"][4]), 0, "thing")]


def count_of_outputs(outputs: Mapping[str, np.ndarray], frame: FrameMeta, geometry: InputGeometry) -> int:
    """Wrong: returns a number."""
    return len(outputs)


def dict_detections(outputs: Mapping[str, np.ndarray], frame: FrameMeta, geometry: InputGeometry) -> list[object]:
    """Wrong: returns detections as dicts."""
    return [{"box": [0, 0, 1, 1], "score": 0.5}]


class Decoders:
    @staticmethod
    def nothing(outputs: Mapping[str, np.ndarray], frame: FrameMeta, geometry: InputGeometry) -> list[Detection]:
        return []
