"""Cut a TensorFlow Object Detection API SSD graph after its box head (graph option `ssd_split`).

What is left is what an accelerator runs well: the preprocessing, the backbone and the box and class
predictors, with their score converter (a sigmoid) and the background class dropped. Gone are the
per-image resize Loop (replaced by the same resize on the whole batch, or by nothing when the input
already has the model's size, as when the pipeline's preprocessing is folded in), TF's box decoder and
its NMS Loop, which ran on the host one frame at a time. The SDK then decodes and suppresses on the
host (`edge_sdk.postprocess.ssd_decode`), with the settings `find_ssd_head` read from the graph.

Outputs of the cut graph: `box_encodings` [N, A, 4] (ty, tx, th, tw per anchor) and `class_scores`
[N, A, C]. The input stays the model's own.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .graph_edit import copy_model, keep_ir_version, prune
from .shape_inference import infer_shapes
from .ssd_head import SsdHead, find_ssd_head

BOX_ENCODINGS = "box_encodings"
"""Output of the cut graph: [N, anchors, 4] raw box encodings."""
CLASS_SCORES = "class_scores"
"""Output of the cut graph: [N, anchors, classes] scores, background excluded."""

_PREFIX = "edge_sdk.ssd_split/"


class SsdSplit:
    """Graph pass: keep the graph up to the raw box encodings and class scores."""

    name = "ssd_split"

    def __init__(self) -> None:
        self.detail = ""

    def apply(self, model: onnx.ModelProto) -> onnx.ModelProto:
        head = find_ssd_head(model)
        out = copy_model(model)
        graph = out.graph
        batched = _BatchedImages(model, head)
        for node in graph.node:
            node.input[:] = [batched.output if name == head.resized else name for name in node.input]
        # The new nodes take the resize Loop's place: after what it read, before what read it.
        position = next(i for i, node in enumerate(graph.node) if list(node.output) == list(head.resize_loop.output))
        for offset, node in enumerate(batched.nodes):
            graph.node.insert(position + offset, node)
        graph.initializer.extend(batched.initializers)
        graph.node.extend(
            [
                helper.make_node("Identity", [head.box_encodings], [BOX_ENCODINGS], name=_PREFIX + BOX_ENCODINGS),
                helper.make_node("Identity", [head.class_scores], [CLASS_SCORES], name=_PREFIX + CLASS_SCORES),
            ]
        )
        batch = _batch_dim(model)
        anchors = len(head.decoding.anchors)
        del graph.output[:]
        graph.output.extend(
            [
                helper.make_tensor_value_info(BOX_ENCODINGS, TensorProto.FLOAT, [batch, anchors, 4]),
                helper.make_tensor_value_info(CLASS_SCORES, TensorProto.FLOAT, [batch, anchors, "classes"]),
            ]
        )
        prune(graph)
        _type_outputs(out)
        keep_ir_version(model, out)
        shapes = {o.name: _dims(o) for o in out.graph.output}
        self.detail = (
            f"cut before the TF box decoder and NMS: outputs {BOX_ENCODINGS} {shapes[BOX_ENCODINGS]} and "
            f"{CLASS_SCORES} {shapes[CLASS_SCORES]}; the per-image resize Loop {batched.how}"
        )
        return out


class _BatchedImages:
    """Nodes that make, for the whole batch at once, what the resize Loop made image by image: nothing
    but the Loop's layout change when the images already have the model's size, else the Loop's own
    Resize (same mode and coordinate transformation) on the batch."""

    def __init__(self, model: onnx.ModelProto, head: SsdHead):
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        height, width = head.input_size
        dims = _inferred_dims(model, head.resize_source)
        x = head.resize_source
        if dims is not None and len(dims) == 4 and (dims[1], dims[2]) == (height, width):
            self.output = (
                self._node("Transpose", [x], "nchw", perm=[0, 3, 1, 2]) if head.resized_layout == "nchw" else x
            )
            self.how = f"dropped (its images are {width}x{height} already)"
            return
        x = self._node("Transpose", [x], "nchw", perm=[0, 3, 1, 2])
        batch_and_channels = self._node("Slice", [self._node("Shape", [x], "shape"), self._const("zero", [0]),
                                                  self._const("two", [2])], "batch_and_channels")  # fmt: skip
        sizes = self._node("Concat", [batch_and_channels, self._const("size", [height, width])], "sizes", axis=0)
        x = self._node("Resize", [x, "", "", sizes], "resized")
        self.nodes[-1].attribute.extend(head.resize_node.attribute)
        if head.resized_layout == "nhwc":
            x = self._node("Transpose", [x], "nhwc", perm=[0, 2, 3, 1])
        self.output = x
        self.how = f"replaced by one Resize of the batch to {width}x{height}"

    def _node(self, op: str, inputs: list[str], name: str, **attributes: Any) -> str:
        output = _PREFIX + name
        self.nodes.append(helper.make_node(op, inputs, [output], name=output, **attributes))
        return output

    def _const(self, name: str, values: list[int]) -> str:
        self.initializers.append(numpy_helper.from_array(np.array(values, np.int64), _PREFIX + name))
        return _PREFIX + name


def _inferred_dims(model: onnx.ModelProto, name: str) -> list[int | str] | None:
    for value in infer_shapes(model).graph.value_info:
        if value.name == name:
            return _dims(value)
    return None


def _dims(value: onnx.ValueInfoProto) -> list[int | str]:
    return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in value.type.tensor_type.shape.dim]


def _batch_dim(model: onnx.ModelProto) -> int | str:
    initializers = {init.name for init in model.graph.initializer}
    first = next(value for value in model.graph.input if value.name not in initializers)
    dims = first.type.tensor_type.shape.dim
    if dims and dims[0].HasField("dim_value"):
        return int(dims[0].dim_value)
    return (dims[0].dim_param if dims else "") or "N"


def _type_outputs(model: onnx.ModelProto) -> None:
    """Fixed sizes where shape inference finds them (the class count, a fixed batch)."""
    typed = infer_shapes(model).graph
    inferred = {
        value.name: value for value in [*typed.value_info, *typed.output] if value.type.tensor_type.HasField("shape")
    }
    for output in model.graph.output:
        if output.name in inferred:
            output.type.CopyFrom(inferred[output.name].type)
