"""Constant folding: nodes whose inputs are all known ahead of time become initializers."""

from __future__ import annotations

import importlib.util
import logging

import numpy as np
import onnx
from onnx import numpy_helper

from edge_sdk.core.errors import BackendUnavailableError

from .graph_edit import constant_values, copy_model, node_count, opset_version, prune, subgraphs
from .shape_inference import infer_shapes

log = logging.getLogger(__name__)

MAX_ELEMENTS = 1 << 22
"""Largest tensor (elements) folded, read or written: 16 MB of float32, e.g. a transposed FC weight,
but not a constant expanded to a full frame, which would only bloat the file."""

_RANDOM_OPS = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli"}


def onnxscript_available() -> bool:
    return importlib.util.find_spec("onnxscript") is not None


class ConstantFolding:
    """Fold constant subgraphs (Constant nodes, shape arithmetic, weight transposes) into initializers.

    Uses onnxscript's optimizer when it is installed (it also resolves partly-known shapes); else a
    small evaluator built on `onnx.reference` that folds nodes whose inputs are all constants and
    `Shape` of a fully known shape. `engine` picks one explicitly: "auto", "onnxscript", "reference".
    """

    name = "constant_folding"

    def __init__(self, engine: str = "auto", max_elements: int = MAX_ELEMENTS):
        if engine not in ("auto", "onnxscript", "reference"):
            raise ValueError(f"engine: expected auto, onnxscript or reference, got {engine!r}")
        self.engine = engine
        self.max_elements = max_elements
        self.detail = ""

    def apply(self, model: onnx.ModelProto) -> onnx.ModelProto:
        use_onnxscript = self.engine == "onnxscript" or (self.engine == "auto" and onnxscript_available())
        before = node_count(model)
        folded, used = None, "onnx.reference"
        if use_onnxscript:
            try:
                folded, used = self._with_onnxscript(model), "onnxscript"
            except BackendUnavailableError:
                raise
            except Exception as exc:  # an onnxscript bug on an unusual graph should not fail a build
                if self.engine == "onnxscript":
                    raise
                log.warning(
                    "onnxscript constant folding failed (%s: %s); using onnx.reference", type(exc).__name__, exc
                )
        if folded is None:
            folded = self._with_reference(model)
        removed = before - node_count(folded)
        self.detail = f"folded {removed} node{'s' if removed != 1 else ''} into initializers ({used})"
        return folded

    def _with_onnxscript(self, model: onnx.ModelProto) -> onnx.ModelProto:
        try:
            import onnx_ir as ir
            import onnx_ir.passes.common as common
            from onnxscript.optimizer import fold_constants_ir
        except ImportError:
            raise BackendUnavailableError("constant folding with onnxscript: install edge-sdk[graph]") from None
        graph = ir.serde.deserialize_model(model)
        fold_constants_ir(graph, input_size_limit=self.max_elements, output_size_limit=self.max_elements)
        common.RemoveUnusedNodesPass()(graph)
        common.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0)(graph)
        folded = ir.serde.serialize_model(graph)
        prune(folded.graph)
        return folded

    def _with_reference(self, model: onnx.ModelProto) -> onnx.ModelProto:
        from onnx.reference import ReferenceEvaluator

        model = copy_model(model)
        graph = model.graph
        opsets = {"": opset_version(model)}
        shapes = _static_shapes(infer_shapes(model))
        constants = constant_values(graph)
        outputs = {o.name for o in graph.output}
        for node in list(graph.node):
            if any(out in outputs for out in node.output):
                continue
            values = self._evaluate(node, constants, shapes, opsets, ReferenceEvaluator)
            if values is None:
                continue
            graph.node.remove(node)
            for name, value in zip(node.output, values, strict=False):
                if name:
                    constants[name] = value
                    graph.initializer.append(numpy_helper.from_array(value, name))
        prune(graph)
        return model

    def _evaluate(
        self,
        node: onnx.NodeProto,
        constants: dict[str, np.ndarray],
        shapes: dict[str, list[int]],
        opsets: dict[str, int],
        evaluator: type,
    ) -> list[np.ndarray] | None:
        if node.domain not in ("", "ai.onnx") or node.op_type in _RANDOM_OPS or any(subgraphs(node)):
            return None
        if node.op_type == "Shape" and node.input[0] not in constants and node.input[0] in shapes:
            start = next((a.i for a in node.attribute if a.name == "start"), 0)
            end = next((a.i for a in node.attribute if a.name == "end"), None)
            return [np.array(shapes[node.input[0]][start:end], dtype=np.int64)]
        inputs = [name for name in node.input if name]
        if not all(name in constants for name in inputs):
            return None
        if sum(constants[name].size for name in inputs) > self.max_elements:
            return None
        try:
            values = evaluator(node, opsets=opsets).run(None, {name: constants[name] for name in inputs})
        except Exception:  # an op the reference evaluator lacks: leave it to the runtime
            return None
        results = [np.asarray(v) for v in values]
        if any(v.dtype == object or v.size > self.max_elements for v in results):
            return None
        return results


def _static_shapes(model: onnx.ModelProto) -> dict[str, list[int]]:
    """Tensors whose every dimension is a known number."""
    shapes = {}
    for info in [*model.graph.input, *model.graph.value_info, *model.graph.output]:
        tensor_type = info.type.tensor_type
        if not tensor_type.HasField("shape"):
            continue
        dims = tensor_type.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            shapes[info.name] = [d.dim_value for d in dims]
    return shapes
