"""Read the post-processing of a TensorFlow Object Detection API SSD graph (as tf2onnx converts it).

Such a graph runs, after the backbone and box head:
- `Preprocessor/map`: a Loop that resizes each image to the model size (fixed_shape_resizer);
- `Postprocessor/Decode`: TF's box coder, anchors + raw encodings (ty, tx, th, tw) -> corners;
- `Postprocessor/BatchMultiClassNonMaxSuppression`: a Loop over the batch with NonMaxSuppression,
  a sort, a clip to the image window, and padding to a fixed number of detections.

`find_ssd_head` finds where the raw head's tensors enter that post-processing and everything the
post-processing does with them: the anchors (a constant), the box coder's scale factors, the NMS
score and IoU thresholds, the detections kept per class and in total, the clip window and the class
id offset. Nothing is assumed: each value is read from the graph, and a graph that does not have
the expected structure is refused with what was missing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from edge_sdk.core.errors import ModelError

from .graph_edit import constant_values, subgraphs
from .ssd_decoding import SsdDecoding

_WHAT = "a TensorFlow Object Detection API SSD graph (converted by tf2onnx)"
_DECODE = "Postprocessor/Decode/"
_ANCHOR_SPLIT = _DECODE + "get_center_coordinates_and_sizes/unstack"
_ENCODING_SPLIT = _DECODE + "unstack"
_PASS_THROUGH = ("Cast", "Squeeze", "Unsqueeze", "Reshape", "Identity")
_OUTPUT_ROLES = ("num_detections", "detection_boxes", "detection_scores", "detection_classes")


@dataclass(frozen=True, eq=False)
class SsdHead:
    """Where an SSD graph's post-processing starts, and what it does."""

    box_encodings: str
    """[N, A, 4] raw box encodings (ty, tx, th, tw) of every anchor."""
    class_scores: str
    """[N, A, C] scores per anchor and class, after the score converter and without the background class."""
    resize_loop: onnx.NodeProto
    """The Loop that resizes each image (TF's Preprocessor/map)."""
    resize_source: str
    """[N, H, W, 3] float images the resize Loop reads."""
    resized: str
    """The resize Loop's output of resized images."""
    resized_layout: str
    """'nchw' or 'nhwc': the layout the resize Loop writes its images in (tf2onnx may move a transpose into it)."""
    resize_node: onnx.NodeProto
    """The Resize inside the Loop (its mode and coordinate transformation)."""
    input_size: tuple[int, int]
    """(height, width) the Loop resizes to."""
    decoding: SsdDecoding


def find_ssd_head(model: onnx.ModelProto) -> SsdHead:
    """The head of a TF Object Detection API SSD graph; ModelError naming what is missing otherwise."""
    return _HeadReader(model).read()


def is_ssd_graph(model: onnx.ModelProto) -> bool:
    try:
        find_ssd_head(model)
    except ModelError:
        return False
    return True


class _HeadReader:
    def __init__(self, model: onnx.ModelProto):
        self.graph = model.graph
        self.constants = constant_values(self.graph)
        self.producer = {out: node for node in self.graph.node for out in node.output if out}
        self.by_name = {node.name: node for node in self.graph.node if node.name}

    def read(self) -> SsdHead:
        nms_loop, nms = self._nms()
        body = _body(nms_loop)
        body_constants = self.constants | constant_values(body)
        score_threshold = self._scalar(nms.input[4] if len(nms.input) > 4 else "", body_constants, "score threshold")
        iou_threshold = self._scalar(nms.input[3] if len(nms.input) > 3 else "", body_constants, "IoU threshold")
        max_per_class = int(self._traced_constant(body, nms.input[2], body_constants, "detections per class"))
        max_total = int(self._traced_constant(body, self._range_limit(body), body_constants, "detections in total"))
        class_scores = self._outer_source(body, nms.input[1], "NMS scores", body_constants)
        encodings, anchors, multipliers = self._decode()
        resize = self._resize_loop(nms_loop)
        decoding = SsdDecoding(
            anchors=anchors,
            scale_factors=tuple(float(1.0 / np.float64(m)) for m in multipliers),  # type: ignore[arg-type]
            multipliers=multipliers,
            score_threshold=score_threshold,
            iou_threshold=iou_threshold,
            max_per_class=max_per_class,
            max_total=max_total,
            clip_window=self._clip_window(resize),
            class_id_offset=self._class_id_offset(),
            output_names=self._output_names(),
        )
        return SsdHead(
            box_encodings=encodings,
            class_scores=class_scores,
            resize_loop=resize.loop,
            resize_source=resize.source,
            resized=resize.images,
            resized_layout=resize.layout,
            resize_node=resize.node,
            input_size=resize.size,
            decoding=decoding,
        )

    # -- NMS -----------------------------------------------------------------------------------------

    def _nms(self) -> tuple[onnx.NodeProto, onnx.NodeProto]:
        found = [
            (node, inner)
            for node in self.graph.node
            if node.op_type == "Loop"
            for inner in _walk(_body(node))
            if inner.op_type == "NonMaxSuppression"
        ]
        if not found:
            raise ModelError(f"expected {_WHAT}: no NonMaxSuppression inside a Loop")
        loops = {id(loop) for loop, _nms in found}
        if len(loops) != 1:
            raise ModelError(f"expected {_WHAT} with one NMS Loop, got {len(loops)}")
        settings = {tuple(nms.input[2:]) for _loop, nms in found}
        if len(settings) != 1:
            raise ModelError(f"expected {_WHAT} whose NMS nodes share their settings, got {len(settings)} sets")
        return found[0]

    def _range_limit(self, body: onnx.GraphProto) -> str:
        """TF keeps min(max_total_size, boxes) with a gather of range(0, that)."""
        ranges = [node for node in body.node if node.op_type == "Range"]
        if len(ranges) != 1:
            raise ModelError(
                f"expected {_WHAT}: one Range (the total detections kept) in the NMS Loop, got {len(ranges)}"
            )
        return ranges[0].input[1]

    def _traced_constant(self, body: onnx.GraphProto, name: str, constants: dict[str, np.ndarray], what: str) -> float:
        """The one constant among the inputs of the Min that bounds `name` (through casts and reshapes)."""
        local = {out: node for node in body.node for out in node.output if out}
        for _ in range(8):
            if name in constants:
                return float(np.asarray(constants[name]).reshape(-1)[0])
            node = local.get(name) or self.producer.get(name)
            if node is None:
                break
            if node.op_type == "Min":
                values = [constants[i] for i in node.input if i in constants]
                if len(values) == 1:
                    return float(np.asarray(values[0]).reshape(-1)[0])
                break
            if node.op_type not in _PASS_THROUGH:
                break
            name = node.input[0]
        raise ModelError(f"expected {_WHAT}: cannot read its {what} from the NMS Loop")

    def _outer_source(self, body: onnx.GraphProto, name: str, what: str, constants: dict[str, np.ndarray]) -> str:
        """The main-graph tensor that the body's `name` is gathered from (one frame's slice of it): the
        first non-constant input of each node upwards (ONNX puts data inputs first)."""
        local = {out: node for node in body.node for out in node.output if out}
        inner_inputs = {value.name for value in body.input}
        while name in local:
            node = local[name]
            data = [i for i in node.input if i and i not in constants and i not in inner_inputs]
            if not data:
                break
            name = data[0]
        if name in local or name in inner_inputs or name not in self.producer:
            raise ModelError(f"expected {_WHAT}: cannot find the tensor its {what} come from")
        return name

    # -- decode --------------------------------------------------------------------------------------

    def _decode(self) -> tuple[str, np.ndarray, tuple[float, float, float, float]]:
        anchor_split = self.by_name.get(_ANCHOR_SPLIT)
        encoding_split = self.by_name.get(_ENCODING_SPLIT)
        if anchor_split is None or encoding_split is None:
            raise ModelError(f"expected {_WHAT}: no box decoder ('{_ENCODING_SPLIT}', '{_ANCHOR_SPLIT}')")
        anchors = self._upstream_constant(anchor_split.input[0], "anchors").astype(np.float32).reshape(-1, 4)
        self._check_anchor_layout(anchor_split)
        encodings = self._upstream_tensor(encoding_split.input[0])
        multipliers = self._scale_multipliers(encoding_split)
        return encodings, anchors, multipliers

    def _upstream_constant(self, name: str, what: str) -> np.ndarray:
        for _ in range(8):
            if name in self.constants:
                return np.asarray(self.constants[name])
            node = self.producer.get(name)
            if node is None or node.op_type not in ("Transpose", "Reshape", "Tile", "Identity"):
                break
            name = node.input[0]
        raise ModelError(f"expected {_WHAT}: its {what} are not a constant")

    def _upstream_tensor(self, name: str) -> str:
        """Before the decoder's own reshapes and transposes: the head's [N, A, 4] encodings."""
        while (node := self.producer.get(name)) is not None and node.op_type in ("Transpose", "Reshape"):
            name = node.input[0]
        return name

    def _split_readers(self, split: onnx.NodeProto) -> dict[int, list[onnx.NodeProto]]:
        """Split output index -> the nodes that read it, past a Squeeze."""
        readers: dict[int, list[onnx.NodeProto]] = {}
        for index, out in enumerate(split.output):
            names = {out}
            names |= {n.output[0] for n in self.graph.node if n.op_type == "Squeeze" and n.input[0] == out}
            readers[index] = [n for n in self.graph.node if n.op_type != "Squeeze" and set(n.input) & names]
        return readers

    def _check_anchor_layout(self, split: onnx.NodeProto) -> None:
        """TF's BoxList corners are ymin, xmin, ymax, xmax: height = [2] - [0], width = [3] - [1]."""
        readers = self._split_readers(split)
        subs = set()
        for nodes in readers.values():
            for node in nodes:
                if node.op_type == "Sub":
                    subs.add((self._split_index(split, node.input[0]), self._split_index(split, node.input[1])))
        if not {(2, 0), (3, 1)} <= subs:
            raise ModelError(f"expected {_WHAT} with anchors as ymin, xmin, ymax, xmax, got differences {sorted(subs)}")

    def _split_index(self, split: onnx.NodeProto, name: str) -> int | None:
        node = self.producer.get(name)
        if node is not None and node.op_type == "Squeeze":
            name = node.input[0]
        return list(split.output).index(name) if name in split.output else None

    def _scale_multipliers(self, split: onnx.NodeProto) -> tuple[float, float, float, float]:
        found: dict[int, float] = {}
        for index, nodes in self._split_readers(split).items():
            for node in nodes:
                constant = [self.constants[i] for i in node.input if i in self.constants]
                if node.op_type in ("Mul", "Div") and len(constant) == 1 and np.asarray(constant[0]).size == 1:
                    value = float(np.asarray(constant[0], np.float32).reshape(-1)[0])
                    found[index] = value if node.op_type == "Mul" else float(np.float32(1.0) / np.float32(value))
        if sorted(found) != [0, 1, 2, 3]:
            raise ModelError(f"expected {_WHAT}: cannot read the box coder's four scale factors, got {found}")
        exps = {self._split_index_of_exp(split, node) for node in self.graph.node if node.op_type == "Exp"}
        if not {2, 3} <= exps:
            raise ModelError(f"expected {_WHAT} whose box coder takes exp() of encodings 2 and 3 (th, tw)")
        return found[0], found[1], found[2], found[3]

    def _split_index_of_exp(self, split: onnx.NodeProto, exp: onnx.NodeProto) -> int | None:
        scaled = self.producer.get(exp.input[0])
        if scaled is None or scaled.op_type not in ("Mul", "Div"):
            return None
        for name in scaled.input:
            index = self._split_index(split, name)
            if index is not None:
                return index
        return None

    # -- the resize Loop and the clip window ---------------------------------------------------------

    def _resize_loop(self, nms_loop: onnx.NodeProto) -> _ResizeLoop:
        loops = [
            node
            for node in self.graph.node
            if node.op_type == "Loop" and node is not nms_loop and any(n.op_type == "Resize" for n in _body(node).node)
        ]
        if len(loops) != 1:
            raise ModelError(f"expected {_WHAT}: one Loop that resizes the images, got {len(loops)}")
        loop = loops[0]
        body = _body(loop)
        resize = next(n for n in body.node if n.op_type == "Resize")
        local = {out: node for node in body.node for out in node.output if out}
        body_constants = self.constants | constant_values(body)
        source = self._outer_source(body, resize.input[0], "images", body_constants)
        layout = "nhwc"
        before = local.get(resize.input[0])
        if before is not None and before.op_type == "Transpose":
            if list(helper.get_attribute_value(before.attribute[0])) != [0, 3, 1, 2]:
                raise ModelError(f"expected {_WHAT}: its resize Loop transposes images in an unknown way")
            layout = "nchw"
        size = self._resize_size(resize, local, body_constants, layout)
        scan_outputs = list(loop.output)[len(loop.input) - 2 :]
        body_scans = list(body.output)[len(loop.input) - 1 :]
        images = None
        true_shape = None
        for outer, inner in zip(scan_outputs, body_scans, strict=True):
            producer = local.get(inner.name)
            source_name = producer.input[0] if producer is not None and producer.op_type == "Identity" else None
            if source_name is not None and source_name in body_constants:
                true_shape = np.asarray(body_constants[source_name]).reshape(-1)
            elif self._reaches(local, inner.name, resize.output[0]):
                images = outer
        if images is None or true_shape is None or len(true_shape) != 3:
            raise ModelError(f"expected {_WHAT}: its resize Loop yields resized images and their shapes")
        return _ResizeLoop(loop, resize, source, images, layout, size, (int(true_shape[0]), int(true_shape[1])))

    def _resize_size(
        self, resize: onnx.NodeProto, local: dict[str, onnx.NodeProto], constants: dict[str, np.ndarray], layout: str
    ) -> tuple[int, int]:
        sizes = resize.input[3] if len(resize.input) > 3 else ""
        node = local.get(sizes)
        tail = None
        if sizes in constants:
            tail = np.asarray(constants[sizes]).reshape(-1)[-2:]
        elif node is not None and node.op_type == "Concat" and node.input[-1] in constants:
            tail = np.asarray(constants[node.input[-1]]).reshape(-1)
        if tail is None or len(tail) < 2:
            raise ModelError(f"expected {_WHAT}: its resize Loop resizes to a fixed size")
        if layout == "nhwc" and len(tail) >= 3:
            tail = tail[-3:-1]
        return int(tail[-2]), int(tail[-1])

    @staticmethod
    def _reaches(local: dict[str, onnx.NodeProto], name: str, target: str) -> bool:
        seen = 0
        while name in local and seen < 16:
            if name == target:
                return True
            name = local[name].input[0]
            seen += 1
        return name == target

    def _clip_window(self, resize: _ResizeLoop) -> tuple[float, float, float, float]:
        """TF's clip window: [0, 0, true height / resized height, true width / resized width], the
        divisions folded into Mul nodes `Postprocessor/truediv` (height) and `truediv_1` (width)."""
        factors = []
        for name in ("Postprocessor/truediv", "Postprocessor/truediv_1"):
            node = self.by_name.get(name)
            values = [self.constants[i] for i in node.input if i in self.constants] if node is not None else []
            if node is None or node.op_type not in ("Mul", "Div") or len(values) != 1:
                raise ModelError(f"expected {_WHAT}: cannot read its clip window ('{name}')")
            value = np.float32(np.asarray(values[0]).reshape(-1)[0])
            factors.append(value if node.op_type == "Mul" else np.float32(1.0) / value)
        height, width = resize.true_size
        return 0.0, 0.0, float(np.float32(height) * factors[0]), float(np.float32(width) * factors[1])

    # -- outputs ---------------------------------------------------------------------------------------

    def _class_id_offset(self) -> float:
        name = self._output_names().get("detection_classes")
        node = self.producer.get(name or "")
        if node is not None and node.op_type == "Add":
            values = [self.constants[i] for i in node.input if i in self.constants]
            if len(values) == 1:
                return float(np.asarray(values[0]).reshape(-1)[0])
        return 0.0

    def _output_names(self) -> dict[str, str]:
        names: dict[str, str] = {}
        for output in self.graph.output:
            for role in _OUTPUT_ROLES:
                if output.name.split(":")[0] == role:
                    names[role] = output.name
        return names

    @staticmethod
    def _scalar(name: str, constants: dict[str, np.ndarray], what: str) -> float:
        if name not in constants or np.asarray(constants[name]).size != 1:
            raise ModelError(f"expected {_WHAT}: its NMS {what} is not a constant")
        return float(np.asarray(constants[name], np.float32).reshape(-1)[0])


@dataclass(frozen=True)
class _ResizeLoop:
    loop: onnx.NodeProto
    node: onnx.NodeProto
    source: str
    images: str
    layout: str
    size: tuple[int, int]
    true_size: tuple[int, int]


def _body(node: onnx.NodeProto) -> onnx.GraphProto:
    return next(subgraphs(node))


def _walk(graph: onnx.GraphProto) -> Iterable[onnx.NodeProto]:
    for node in graph.node:
        yield node
        for body in subgraphs(node):
            yield from _walk(body)
