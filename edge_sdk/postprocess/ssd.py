"""SSD-style detectors (TensorFlow Object Detection API layout): boxes, scores and classes after NMS.

`decode: graph` reads the graph's own detections. `decode: sdk` is for engines whose graph was cut
after the box head (`edge_sdk.graph.ssd_split`, asked for by the pipeline): it decodes the raw box
encodings and class scores on the host, with the anchors and NMS settings of the uncut graph
(`decode_model`), and reads outputs that hold the graph's detections (the uncut model) as they are.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import Field

from edge_sdk.core.errors import ConfigError, ModelError
from edge_sdk.core.geometry import InputGeometry
from edge_sdk.core.model_file import read_model_bytes
from edge_sdk.core.results import Detection, FrameMeta, Result
from edge_sdk.core.tensor_meta import TensorMeta

from .base import Postprocessor, PostprocessSpecBase, label_for
from .ssd_decode import BOX_ENCODINGS, CLASS_SCORES, SsdDecoder

if TYPE_CHECKING:
    from edge_sdk.graph.ssd_decoding import SsdDecoding


class SsdSpec(PostprocessSpecBase):
    type: Literal["ssd"] = Field(description="Boxes, scores and classes already filtered by NMS in the graph.")
    boxes: str = Field(
        "detection_boxes:0", description="Output with [N, K, 4] boxes normalised to the model input (0..1)."
    )
    scores: str = Field("detection_scores:0", description="Output with [N, K] scores.")
    classes: str = Field("detection_classes:0", description="Output with [N, K] class ids.")
    count: str | None = Field("num_detections:0", description="Output with [N] valid detections; null = all K.")
    box_order: Literal["yxyx", "xyxy"] = Field("yxyx", description="Coordinate order inside each box.")
    class_offset: int = Field(1, description="Subtract from class ids before looking up labels (TF uses 1).")
    score_threshold: float = Field(0.5, ge=0.0, le=1.0, description="Drop detections scoring below this.")
    labels: list[str] = Field(default_factory=list, description="Class names by (offset) class id.")
    decode: Literal["graph", "sdk"] = Field(
        "graph",
        description="graph: the model's own decoder and NMS run in the engine (a TF graph runs them in a Loop, "
        "one frame at a time, on the host). sdk: the engine is cut after the box head (TF Object Detection API "
        "SSD graphs), so only the backbone and the box and class predictors run on the accelerator; the SDK "
        "decodes the boxes and runs NMS on the host with the settings read from the graph (same anchors, box "
        "scales, score and IoU thresholds, detections per class and in total).",
    )
    decode_model: Path | None = Field(
        None,
        description="decode: sdk: the uncut ONNX model whose graph holds the anchors and NMS settings; null = "
        "the pipeline's model.path (filled in when the pipeline loads).",
    )

    def build(self) -> SsdPostprocessor:
        return SsdPostprocessor(self)


class SsdPostprocessor(Postprocessor):
    def __init__(self, spec: SsdSpec):
        self.spec = spec
        self.decoder: SsdDecoder | None = None
        """The host decoder (decode: sdk)."""
        if spec.decode == "sdk":
            if spec.decode_model is None:
                raise ConfigError(
                    "postprocess decode: sdk: expected decode_model (the uncut model holding the anchors and NMS "
                    "settings), got none; a pipeline file fills it with model.path"
                )
            self.decoder = SsdDecoder(ssd_decoding(spec.decode_model))

    def required_outputs(self) -> Sequence[str]:
        if self.decoder is not None:
            return [BOX_ENCODINGS, CLASS_SCORES]
        return self._graph_outputs()

    def check_outputs(self, outputs: Sequence[TensorMeta]) -> None:
        """decode: sdk takes the cut engine's raw outputs, or the uncut model's detections."""
        names = {meta.name for meta in outputs}
        if self.decoder is not None and names >= {BOX_ENCODINGS, CLASS_SCORES}:
            return
        missing = [name for name in self._graph_outputs() if name not in names]
        if missing:
            raw = f" (or {BOX_ENCODINGS} and {CLASS_SCORES}, a cut engine's)" if self.decoder is not None else ""
            raise ModelError(
                f"post-processor expects model outputs {missing}{raw}, the model has {sorted(names)} "
                "(set the output names under postprocess:)"
            )

    def _graph_outputs(self) -> list[str]:
        names = [self.spec.boxes, self.spec.scores, self.spec.classes]
        return names + ([self.spec.count] if self.spec.count else [])

    def __call__(self, outputs: Mapping[str, np.ndarray], frame: FrameMeta, geometry: InputGeometry) -> Result:
        spec = self.spec
        if self.decoder is not None and BOX_ENCODINGS in outputs and CLASS_SCORES in outputs:
            found = self.decoder(outputs[BOX_ENCODINGS], outputs[CLASS_SCORES], spec.score_threshold)
            classes = found.classes.astype(np.float32) + np.float32(self.decoder.decoding.class_id_offset)
            return self._result(found.boxes, found.scores, classes, frame, geometry, box_order="yxyx")
        if self.decoder is not None and spec.boxes not in outputs:
            raise ModelError(
                f"postprocess decode: sdk: expected outputs {BOX_ENCODINGS} and {CLASS_SCORES} (a cut engine) or "
                f"{spec.boxes} (the uncut model), got {sorted(outputs)}"
            )
        boxes, scores, classes = outputs[spec.boxes], outputs[spec.scores], outputs[spec.classes]
        count = int(outputs[spec.count]) if spec.count else len(scores)
        keep = np.flatnonzero(scores[:count] >= spec.score_threshold)
        return self._result(boxes[keep], scores[keep], classes[keep], frame, geometry, box_order=spec.box_order)

    def _result(
        self,
        boxes: np.ndarray,
        scores: np.ndarray,
        classes: np.ndarray,
        frame: FrameMeta,
        geometry: InputGeometry,
        box_order: str,
    ) -> Result:
        spec = self.spec
        corners = np.asarray(boxes, np.float32).reshape(-1, 4).copy()
        if box_order == "yxyx":
            corners = corners[:, [1, 0, 3, 2]]
        # Normalised to the model input; the input may hold the frame letterboxed.
        corners *= np.array([geometry.input_width, geometry.input_height] * 2, dtype=np.float32)
        framed = geometry.to_frame(corners)
        framed[:, [0, 2]] = np.clip(framed[:, [0, 2]], 0.0, frame.width)
        framed[:, [1, 3]] = np.clip(framed[:, [1, 3]], 0.0, frame.height)
        detections = []
        for (x1, y1, x2, y2), score, tf_class in zip(framed.tolist(), scores.tolist(), classes.tolist(), strict=True):
            class_id = int(tf_class) - spec.class_offset
            detections.append(
                Detection(
                    x1=x1,
                    y1=y1,
                    x2=max(x1, x2),
                    y2=max(y1, y2),
                    score=float(score),
                    class_id=class_id,
                    label=label_for(spec.labels, class_id),
                )
            )
        return Result(frame=frame, detections=tuple(detections))


def ssd_decoding(model: Path) -> SsdDecoding:
    """The decoding settings of the SSD graph in `model` (read once per file version and process)."""
    path = Path(os.path.abspath(model))
    try:
        info = path.stat()
    except OSError as exc:
        raise ModelError(f"postprocess decode: sdk: cannot read {model}: {exc.strerror}") from None
    return _decoding_of(str(path), info.st_mtime_ns, info.st_size)


@functools.lru_cache(maxsize=8)
def _decoding_of(path: str, _mtime_ns: int, _size: int) -> SsdDecoding:
    import onnx

    from edge_sdk.graph.ssd_head import find_ssd_head

    try:
        model = onnx.load_model_from_string(read_model_bytes(Path(path)))
    except ModelError:
        raise
    except Exception as exc:  # a file that is not ONNX: protobuf's DecodeError and friends
        raise ModelError(f"postprocess decode: sdk: {path} is not an ONNX model ({type(exc).__name__})") from None
    try:
        return find_ssd_head(model).decoding
    except ModelError as exc:
        raise ModelError(f"postprocess decode: sdk needs {exc} in {path}") from None
