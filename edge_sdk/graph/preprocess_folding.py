"""Fold the pipeline's preprocessing into the model, so raw BGR uint8 frames go straight in.

The folded model's input is `frame`: uint8 NHWC [N, H, W, 3] in BGR (what sources deliver), any H
and W. Graph nodes then do what `Preprocessor` does in numpy/cv2, with letterbox padding computed in
float64 from the frame's shape exactly as `input_geometry` computes it, and the resize bilinear with
half_pixel and no antialias (as cv2.INTER_LINEAR). Two forms:

- `integer_resize` (CPU providers): resize on uint8 NHWC (ONNX Runtime's CPU integer bilinear
  kernel, the cheapest), NHWC->NCHW while still uint8, colour swap, cast, then scale and mean/std as
  one Mul and one Add;
- otherwise: NHWC->NCHW and cast to float first, resize and pad in float NCHW, colour swap, then
  back to uint8 (round, clip) and NHWC where the model wants that. ONNX Runtime's CUDA Resize is
  wrong on the integer form: it resizes the last two axes whatever the layout, and its uint8
  bilinear truncates the interpolation weights to 0 (onnxruntime/core/providers/cuda/tensor/
  resize_impl.cu; NHWC is excluded from CUDA in ORT's own resize tests). Float NCHW is the layout
  and type every provider's Resize implements.

Where exact, the colour swap, scale and mean/std go into the first convolution's weights and bias
instead: the Conv must be the only consumer of the model input and must not pad (a zero pad in
normalised space is not a zero in raw pixel space). A channel permutation of the weights is always
exact; scaling them changes float rounding only (about 1e-6 relative).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from edge_sdk.core.errors import ModelError
from edge_sdk.core.preprocess import PreprocessSpec, check_input_fits
from edge_sdk.core.tensor_meta import TensorMeta

from .options import FRAME_INPUT

MIN_OPSET = 13
"""Resize and Pad with their sizes and pad values as inputs (opset 13) are what the nodes use."""

_PREFIX = "edge_sdk.preprocess/"
_BGR_TO_RGB = (2, 1, 0)


class PreprocessFolding:
    """Graph pass: replace `input_name` with a raw-frame input and preprocessing nodes."""

    name = "preprocess_folding"

    def __init__(self, spec: PreprocessSpec, input_name: str | None = None, integer_resize: bool = True):
        self.spec = spec
        self.input_name = input_name
        self.integer_resize = integer_resize
        """Resize the raw uint8 NHWC frame (exact on ONNX Runtime's CPU kernels only); else in float NCHW."""
        self.folded_into_conv: str | None = None
        """The Conv whose weights took the colour swap and normalisation, after `apply`; None = explicit nodes."""
        self.detail = ""
        """What `apply` did, for the pass report."""

    def apply(self, model: onnx.ModelProto) -> onnx.ModelProto:
        """A new model taking raw frames; `model` is left unchanged."""
        out = onnx.ModelProto()
        out.CopyFrom(model)
        graph = out.graph
        original = _find_input(graph, self.input_name)
        check_input_fits(self.spec, TensorMeta.from_value_info(original))
        if FRAME_INPUT in _all_names(graph):
            raise ModelError(
                f"expected no tensor named '{FRAME_INPUT}' in the model (the folded input takes that name), "
                f"got one; the model may already take raw frames: set preprocess.fold: false"
            )
        out = _at_least_opset(out, MIN_OPSET)
        graph = out.graph
        found = _find_input(graph, original.name)
        original = onnx.ValueInfoProto()
        original.CopyFrom(found)
        nodes = _FoldNodes(self.spec, integer_resize=self.integer_resize or self.spec.resize is None)
        conv = _foldable_conv(graph, original.name) if self.spec.dtype == "float32" else None
        pixels = nodes.build(FRAME_INPUT, until_normalise=conv is not None)
        self.folded_into_conv = None
        if conv is not None:
            _fold_into_conv(graph, conv, original.name, pixels, nodes)
            self.folded_into_conv = conv.name or conv.output[0]
        else:
            nodes.rename_last(original.name)
        self.detail = self._describe(original.name)
        position = [value.name for value in graph.input].index(original.name)
        frame = helper.make_tensor_value_info(
            FRAME_INPUT, TensorProto.UINT8, [_batch_dim(original), "frame_height", "frame_width", 3]
        )
        graph.input.remove(found)
        graph.input.insert(position, frame)
        if conv is None:
            graph.value_info.append(original)  # the old input lives on as the preprocessed tensor
        graph.initializer.extend(nodes.initializers)
        existing = list(graph.node)
        del graph.node[:]
        graph.node.extend(nodes.nodes + existing)
        return out

    def _describe(self, input_name: str) -> str:
        spec = self.spec
        steps = [f"{FRAME_INPUT} (BGR uint8 NHWC) -> {input_name}:"]
        if spec.resize is not None:
            where = "uint8 NHWC" if self.integer_resize else "float NCHW"
            steps.append(f"{spec.resize_mode} to {spec.resize[0]}x{spec.resize[1]} (in {where}),")
        steps.append(f"{spec.color.upper()} {spec.layout.upper()} {spec.dtype}")
        if self.folded_into_conv is not None:
            steps.append(f"(colour order and normalisation folded into Conv '{self.folded_into_conv}')")
        return " ".join(steps)


@dataclass
class _FoldNodes:
    """Builds the preprocessing nodes, from the raw frame to the tensor the model's input took."""

    spec: PreprocessSpec
    integer_resize: bool = True
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    initializers: list[TensorProto] = field(default_factory=list)

    def build(self, frame: str, until_normalise: bool) -> str:
        """Add the nodes; return the last tensor. `until_normalise` stops before the colour swap
        and normalisation of a float model (the caller folds them into a Conv)."""
        if not self.integer_resize:
            return self._build_in_float(frame, until_normalise)
        spec = self.spec
        x = frame
        if spec.resize is not None:
            x = self._stretch(x, "nhwc") if spec.resize_mode == "stretch" else self._letterbox(x, "nhwc")
        channel_axis = 3
        if spec.layout == "nchw":
            x = self._node("Transpose", [x], "nchw", perm=[0, 3, 1, 2])
            channel_axis = 1
        if spec.color == "rgb" and not until_normalise:
            x = self._bgr_to_rgb(x, channel_axis)
        if spec.dtype == "float32":
            x = self._node("Cast", [x], "float", to=TensorProto.FLOAT)
            if not until_normalise:
                x = self._normalise(x, channel_axis)
        return x

    def _build_in_float(self, frame: str, until_normalise: bool) -> str:
        spec = self.spec
        x = self._node("Transpose", [frame], "nchw", perm=[0, 3, 1, 2])
        x = self._node("Cast", [x], "float", to=TensorProto.FLOAT)
        x = self._stretch(x, "nchw") if spec.resize_mode == "stretch" else self._letterbox(x, "nchw")
        if spec.color == "rgb" and not until_normalise:
            x = self._node("Gather", [x, self._const("bgr_to_rgb", np.array(_BGR_TO_RGB, np.int64))], "rgb", axis=1)
        if spec.dtype == "uint8":  # back to the integers a uint8 model takes, as cv2's resize rounds them
            x = self._node("Round", [x], "rounded")
            x = self._node("Clip", [x, self._const("zero_f", np.array(0, np.float32)),
                                    self._const("max_u8", np.array(255, np.float32))], "clipped")  # fmt: skip
            x = self._node("Cast", [x], "uint8", to=TensorProto.UINT8)
        channel_axis = 1
        if spec.layout == "nhwc":
            x = self._node("Transpose", [x], "nhwc", perm=[0, 2, 3, 1])
            channel_axis = 3
        if spec.dtype == "float32" and not until_normalise:
            x = self._normalise(x, channel_axis)
        return x

    def multiplier_and_offset(self) -> tuple[np.ndarray, np.ndarray]:
        """Per model channel: normalised = raw * a + b, in float64."""
        spec = self.spec
        std = np.asarray(spec.std if spec.std is not None else (1.0, 1.0, 1.0), np.float64)
        mean = np.asarray(spec.mean if spec.mean is not None else (0.0, 0.0, 0.0), np.float64)
        return spec.scale / std, -mean / std

    def channel_order(self) -> tuple[int, int, int]:
        """For each model channel, the raw (BGR) channel it comes from."""
        return _BGR_TO_RGB if self.spec.color == "rgb" else (0, 1, 2)

    def rename_last(self, name: str) -> None:
        """Make the last node write `name` (the tensor the model's own nodes read)."""
        if not self.nodes:
            self.nodes.append(helper.make_node("Identity", [FRAME_INPUT], [name], name=_PREFIX + "frame"))
        self.nodes[-1].output[0] = name

    def _bgr_to_rgb(self, x: str, channel_axis: int) -> str:
        # ONNX Runtime gathers along the last axis one byte at a time (55 ms for a 1080p frame);
        # whole planes of NCHW go ~20x faster, so channel-last data makes the round trip.
        order = self._const("bgr_to_rgb", np.array(_BGR_TO_RGB, np.int64))
        if channel_axis == 1:
            return self._node("Gather", [x, order], "rgb", axis=1)
        planes = self._node("Transpose", [x], "planes", perm=[0, 3, 1, 2])
        swapped = self._node("Gather", [planes, order], "rgb_planes", axis=1)
        return self._node("Transpose", [swapped], "rgb", perm=[0, 2, 3, 1])

    def _stretch(self, x: str, layout: str) -> str:
        width, height = self.spec.resize or (0, 0)
        after_batch = [height, width, 3] if layout == "nhwc" else [3, height, width]
        sizes = self._node("Concat", [self._batch(x), self._const(f"{layout}_sizes", after_batch)], "sizes", axis=0)
        return self._resize(x, sizes)

    def _letterbox(self, x: str, layout: str) -> str:
        # The same float64 operations, in the same order, as input_geometry: scale = min(W/w, H/h),
        # inner = round(size * scale) (half to even in both), pad = (target - inner) // 2.
        width, height = self.spec.resize or (0, 0)
        first_spatial = 1 if layout == "nhwc" else 2
        shape = self._node("Shape", [x], "shape")
        hw_axes = [
            self._const(f"axis{first_spatial}", [first_spatial]),
            self._const(f"axis{first_spatial + 2}", [first_spatial + 2]),
        ]
        size = self._node("Slice", [shape, *hw_axes], "hw")
        size_f = self._node("Cast", [size], "hw_f64", to=TensorProto.DOUBLE)
        target = np.array([height, width], np.float64)
        ratio = self._node("Div", [self._const("target_f64", target), size_f], "ratio")
        ratio_h = self._node("Slice", [ratio, self._const("zero", [0]), self._const("one", [1])], "ratio_h")
        ratio_w = self._node("Slice", [ratio, self._const("one", [1]), self._const("two", [2])], "ratio_w")
        scale = self._node("Min", [ratio_w, ratio_h], "scale")
        inner_f = self._node("Round", [self._node("Mul", [size_f, scale], "scaled")], "inner_f64")
        inner = self._node("Cast", [inner_f], "inner", to=TensorProto.INT64)
        room = self._node("Sub", [self._const("target", target.astype(np.int64)), inner], "room")
        before = self._node("Div", [room, self._const("two_i", [2])], "pad_before")
        after = self._node("Sub", [room, before], "pad_after")
        zero, channels = self._const("zero", [0]), self._const("channels", [3])
        if layout == "nhwc":
            sizes = self._node("Concat", [self._batch(x), inner, channels], "inner_sizes", axis=0)
            pads = self._node("Concat", [zero, before, zero, zero, after, zero], "pads", axis=0)
            grey = self._const("pad_value", np.array(self.spec.pad_value, np.uint8))
        else:
            sizes = self._node("Concat", [self._batch(x), channels, inner], "inner_sizes", axis=0)
            pads = self._node("Concat", [zero, zero, before, zero, zero, after], "pads", axis=0)
            grey = self._const("pad_value_f", np.array(self.spec.pad_value, np.float32))
        return self._node("Pad", [self._resize(x, sizes), pads, grey], "letterboxed", mode="constant")

    def _resize(self, x: str, sizes: str) -> str:
        return self._node(
            "Resize", [x, "", "", sizes], "resized", mode="linear", coordinate_transformation_mode="half_pixel"
        )

    def _batch(self, x: str) -> str:
        shape = self._node("Shape", [x], "frame_shape")
        return self._node("Slice", [shape, self._const("zero", [0]), self._const("one", [1])], "batch")

    def _normalise(self, x: str, channel_axis: int) -> str:
        multiplier, offset = self.multiplier_and_offset()
        shape = [1, 3, 1, 1] if channel_axis == 1 else [3]
        if not np.all(multiplier == 1.0):
            x = self._node(
                "Mul", [x, self._const("multiplier", multiplier.astype(np.float32).reshape(shape))], "scaled"
            )
        if np.any(offset != 0.0):
            x = self._node("Add", [x, self._const("offset", offset.astype(np.float32).reshape(shape))], "normalised")
        return x

    def _node(self, op: str, inputs: list[str], name: str, **attributes: Any) -> str:
        output = self._unique(name)
        self.nodes.append(helper.make_node(op, inputs, [output], name=output, **attributes))
        return output

    def _const(self, name: str, value: np.ndarray | list[int]) -> str:
        array = np.asarray(value, np.int64) if isinstance(value, list) else value
        full = _PREFIX + name
        for existing in self.initializers:
            if existing.name == full:
                return full
        self.initializers.append(numpy_helper.from_array(array, full))
        return full

    def _unique(self, name: str) -> str:
        taken = {n.output[0] for n in self.nodes} | {i.name for i in self.initializers}
        candidate, suffix = _PREFIX + name, 1
        while candidate in taken:
            candidate, suffix = f"{_PREFIX}{name}_{suffix}", suffix + 1
        return candidate


def _find_input(graph: onnx.GraphProto, name: str | None) -> onnx.ValueInfoProto:
    initializers = {init.name for init in graph.initializer}
    inputs = [value for value in graph.input if value.name not in initializers]
    if name is None:
        if len(inputs) != 1:
            raise ModelError(
                f"expected the input to fold preprocessing into to be named, got a model with {len(inputs)} "
                f"inputs {[v.name for v in inputs]}"
            )
        return inputs[0]
    for value in inputs:
        if value.name == name:
            return value
    raise ModelError(f"expected an input '{name}' to fold preprocessing into, got inputs {[v.name for v in inputs]}")


def _batch_dim(value: onnx.ValueInfoProto) -> int | str:
    dim = value.type.tensor_type.shape.dim[0]
    if dim.HasField("dim_value"):
        return int(dim.dim_value)
    return dim.dim_param or "N"


def _at_least_opset(model: onnx.ModelProto, version: int) -> onnx.ModelProto:
    current = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    if current >= version:
        return model
    from onnx import version_converter

    try:
        return version_converter.convert_version(model, version)
    except Exception as exc:  # the converter raises several types for ops it cannot upgrade
        raise ModelError(
            f"expected a model at opset {version} or newer to fold preprocessing into, got opset {current} "
            f"that onnx cannot upgrade ({exc}); set preprocess.fold: false"
        ) from None


def _walk(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    for node in graph.node:
        yield node
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                yield from _walk(attribute.g)
            for sub in attribute.graphs:
                yield from _walk(sub)


def _all_names(graph: onnx.GraphProto) -> set[str]:
    names = {v.name for v in graph.input} | {v.name for v in graph.output} | {i.name for i in graph.initializer}
    for node in _walk(graph):
        names.update(node.input)
        names.update(node.output)
    return names


def _foldable_conv(graph: onnx.GraphProto, input_name: str) -> onnx.NodeProto | None:
    """The Conv that may take the normalisation into its weights, or None when that is not exact."""
    consumers = [node for node in _walk(graph) if input_name in node.input]
    top_level = [node for node in graph.node if input_name in node.input]
    if len(consumers) != 1 or len(top_level) != 1 or input_name in {v.name for v in graph.output}:
        return None
    conv = top_level[0]
    if conv.op_type != "Conv" or list(conv.input).index(input_name) != 0:
        return None
    attributes = {a.name: helper.get_attribute_value(a) for a in conv.attribute}
    auto_pad = attributes.get("auto_pad", b"NOTSET")
    if attributes.get("group", 1) != 1 or auto_pad not in (b"NOTSET", b"VALID"):
        return None
    if any(attributes.get("pads", [])):
        return None
    initializers = {init.name: init for init in graph.initializer}
    weight = initializers.get(conv.input[1])
    if weight is None or len(weight.dims) != 4 or weight.dims[1] != 3:
        return None
    if len(conv.input) > 2 and conv.input[2] and conv.input[2] not in initializers:
        return None
    return conv


def _fold_into_conv(
    graph: onnx.GraphProto, conv: onnx.NodeProto, input_name: str, pixels: str, nodes: _FoldNodes
) -> None:
    """conv(W, x * a + b) = conv(W * a, x) + sum(W * b): exact without padding. The colour swap is
    a permutation of W's input channels."""
    initializers = {init.name: init for init in graph.initializer}
    weight = numpy_helper.to_array(initializers[conv.input[1]]).astype(np.float64)
    has_bias = len(conv.input) > 2 and bool(conv.input[2])
    bias = (
        numpy_helper.to_array(initializers[conv.input[2]]).astype(np.float64)
        if has_bias
        else np.zeros(weight.shape[0], np.float64)
    )
    multiplier, offset = nodes.multiplier_and_offset()
    folded_bias = bias + np.einsum("mchw,c->m", weight, offset)
    folded = np.empty_like(weight)
    for model_channel, raw_channel in enumerate(nodes.channel_order()):
        folded[:, raw_channel] = weight[:, model_channel] * multiplier[model_channel]
    weight_name, bias_name = f"{_PREFIX}{conv.input[1]}", f"{_PREFIX}{conv.input[2] if has_bias else 'bias'}"
    nodes.initializers.append(numpy_helper.from_array(folded.astype(np.float32), weight_name))
    nodes.initializers.append(numpy_helper.from_array(folded_bias.astype(np.float32), bias_name))
    old = [name for name in conv.input[1:] if name]
    del conv.input[:]
    conv.input.extend([pixels, weight_name, bias_name])
    used = {name for node in _walk(graph) for name in node.input}
    for name in old:
        if name not in used:
            graph.initializer.remove(initializers[name])
    for value in list(graph.value_info):
        if value.name == input_name:
            graph.value_info.remove(value)
