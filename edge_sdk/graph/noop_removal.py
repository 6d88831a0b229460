"""Remove nodes that pass their input through unchanged at inference time."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import onnx

from .graph_edit import bypass, constant_values, consumers, copy_model, opset_version, producers, prune
from .shape_inference import infer_shapes

Shape = list[int | str | None]


class NoOpRemoval:
    """Identity, Dropout (inference), Cast to the same type, Transpose with the identity perm,
    Reshape to the shape it already has, Squeeze followed by the Unsqueeze that undoes it, and
    Mul/Div by one or Add/Sub of zero (a constant that broadcasts without changing the shape).

    Graph outputs keep their names; readers inside Loop/If bodies are rerouted too.
    """

    name = "noop_removal"

    def __init__(self) -> None:
        self.detail = ""

    def apply(self, model: onnx.ModelProto) -> onnx.ModelProto:
        model = copy_model(model)
        graph = model.graph
        ops_before = Counter(node.op_type for node in graph.node)
        # Types and shapes stay valid while nodes go: a bypassed output has its input's value.
        facts = _TensorFacts(infer_shapes(model), opset_version(model))
        changed = True
        while changed:
            changed = False
            readers = consumers(graph)
            for node in list(graph.node):
                kept = facts.passthrough_input(node, readers)
                if kept is not None and bypass(graph, node, kept):
                    facts.producer = producers(graph)
                    changed = True
                    break  # readers moved: rescan
        prune(graph)
        ops_after = Counter(node.op_type for node in graph.node)
        removed = sorted((ops_before - ops_after).items())
        self.detail = "removed " + ", ".join(f"{n} {op}" for op, n in removed) if removed else ""
        return model


class _TensorFacts:
    """Element types, shapes and constant values known for the main graph's tensors."""

    def __init__(self, inferred: onnx.ModelProto, opset: int):
        graph = inferred.graph
        self.opset = opset
        self.constants = constant_values(graph)
        self.producer = producers(graph)
        self.outputs = {o.name for o in graph.output}
        self.types: dict[str, int] = {}
        self.shapes: dict[str, Shape] = {}
        for info in [*graph.input, *graph.value_info, *graph.output]:
            tensor_type = info.type.tensor_type
            if tensor_type.elem_type:
                self.types[info.name] = tensor_type.elem_type
            if tensor_type.HasField("shape"):
                self.shapes[info.name] = [
                    d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tensor_type.shape.dim
                ]
        for init in graph.initializer:
            self.types[init.name] = init.data_type
            self.shapes[init.name] = list(init.dims)

    def passthrough_input(self, node: onnx.NodeProto, readers: dict[str, list[onnx.NodeProto]]) -> str | None:
        """The input whose value `node`'s first output equals, or None when the node does real work."""
        if node.domain not in ("", "ai.onnx") or not node.input or not node.output[0]:
            return None
        if any(out and readers.get(out) for out in node.output[1:]) or any(o in self.outputs for o in node.output[1:]):
            return None  # a second output (Dropout's mask) is used
        check = getattr(self, f"_{node.op_type.lower()}", None)
        return check(node) if check else None

    def _identity(self, node: onnx.NodeProto) -> str | None:
        return node.input[0]

    def _dropout(self, node: onnx.NodeProto) -> str | None:
        if len(node.input) >= 3 and node.input[2]:
            training = self.constants.get(node.input[2])
            if training is None or bool(training):
                return None
        return node.input[0]

    def _cast(self, node: onnx.NodeProto) -> str | None:
        to = _attribute(node, "to")
        return node.input[0] if to is not None and self.types.get(node.input[0]) == to else None

    def _transpose(self, node: onnx.NodeProto) -> str | None:
        perm = _attribute(node, "perm")
        return node.input[0] if perm is not None and list(perm) == list(range(len(perm))) else None

    def _reshape(self, node: onnx.NodeProto) -> str | None:
        target = self.constants.get(node.input[1]) if len(node.input) > 1 else None
        shape = self.shapes.get(node.input[0])
        if target is None or shape is None or target.ndim != 1 or len(target) != len(shape):
            return None
        allow_zero = _attribute(node, "allowzero") == 1
        unknown = []
        for axis, (want, have) in enumerate(zip(target.tolist(), shape, strict=True)):
            if want == 0 and not allow_zero:
                continue  # 0 copies the input's size
            if want == -1:
                unknown.append(axis)
            elif want != have:
                return None
        # a single -1 is forced to the one size left, which is the input's own
        return node.input[0] if len(unknown) <= 1 else None

    def _unsqueeze(self, node: onnx.NodeProto) -> str | None:
        squeeze = self.producer.get(node.input[0])
        if squeeze is None or squeeze.op_type != "Squeeze":
            return None
        source = self.shapes.get(squeeze.input[0])
        squeezed, unsqueezed = self._axes(squeeze), self._axes(node)
        if source is None or squeezed is None or unsqueezed is None:
            return None
        rank = len(source)
        if sorted(a % rank for a in squeezed) != sorted(a % rank for a in unsqueezed):
            return None
        return squeeze.input[0]

    def _axes(self, node: onnx.NodeProto) -> list[int] | None:
        if self.opset >= 13:
            value = self.constants.get(node.input[1]) if len(node.input) > 1 and node.input[1] else None
            return None if value is None else [int(a) for a in np.ravel(value)]
        axes = _attribute(node, "axes")
        return None if axes is None else list(axes)

    def _mul(self, node: onnx.NodeProto) -> str | None:
        return self._neutral(node, 1.0, commutative=True)

    def _div(self, node: onnx.NodeProto) -> str | None:
        return self._neutral(node, 1.0, commutative=False)

    def _add(self, node: onnx.NodeProto) -> str | None:
        return self._neutral(node, 0.0, commutative=True)

    def _sub(self, node: onnx.NodeProto) -> str | None:
        return self._neutral(node, 0.0, commutative=False)

    def _neutral(self, node: onnx.NodeProto, neutral: float, commutative: bool) -> str | None:
        """X op c == X when c is all `neutral`, has X's type, and broadcasting it keeps X's shape."""
        candidates = [(0, 1), (1, 0)] if commutative else [(0, 1)]
        for data, const in candidates:
            value = self.constants.get(node.input[const])
            data_name = node.input[data]
            data_shape = self.shapes.get(data_name)
            if value is None or data_shape is None or node.input[data] in self.constants:
                continue
            if self.types.get(data_name) != self.types.get(node.input[const]):
                continue
            if value.size != 1 or value.ndim > len(data_shape) or not np.all(value == neutral):
                continue
            return data_name
        return None


def _attribute(node: onnx.NodeProto, name: str) -> Any:
    for attribute in node.attribute:
        if attribute.name == name:
            return onnx.helper.get_attribute_value(attribute)
    return None
