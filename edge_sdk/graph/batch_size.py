"""Fix the batch axis to a number, or make it dynamic, as the device profile asks."""

from __future__ import annotations

import onnx

from edge_sdk.core.errors import ModelError

from .graph_edit import copy_model, producers
from .shape_inference import infer_shapes

DYNAMIC_BATCH = "N"
_PROBE = "edge_sdk_batch"  # a symbol no exporter writes, to follow the batch axis through the graph


class BatchSize:
    """Set axis 0 of the batched inputs and outputs to `batch`, or to the symbol "N" when None.

    An input is batched when its axis 0 is the same size or symbol as the first input's; likewise
    an output whose axis 0 follows the batch. A graph that cannot take another batch size, such as a
    Reshape to a hard-coded batch of 1, is refused with ModelError rather than built to give wrong
    answers.
    """

    name = "batch_size"

    def __init__(self, batch: int | None):
        if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
            raise ModelError(f"batch size: expected a positive integer or None (dynamic), got {batch!r}")
        self.batch = batch
        self.detail = ""

    def apply(self, model: onnx.ModelProto) -> onnx.ModelProto:
        model = copy_model(model)
        graph = model.graph
        initializers = {i.name for i in graph.initializer}
        inputs = [i for i in graph.input if i.name not in initializers]
        if not inputs or not _dims(inputs[0]):
            raise ModelError("batch size: expected a model whose first input has a batch axis, got a scalar input")
        old = _describe(_dims(inputs[0])[0])
        probe = _probe_batch(model, initializers)
        _check_batch_flows(probe, self.batch)
        batched_outputs = [o for o in graph.output if _is_batched(o, probe, _dims(inputs[0])[0])]
        for info in [*[i for i in inputs if _dims(i) and _same(_dims(i)[0], _dims(inputs[0])[0])], *batched_outputs]:
            _set_dim(_dims(info)[0], self.batch)
        del graph.value_info[:]
        new = self.batch if self.batch is not None else DYNAMIC_BATCH
        self.detail = f"batch axis {old} -> {new}"
        return model


def _probe_batch(model: onnx.ModelProto, initializers: set[str]) -> onnx.ModelProto:
    """The model with the batch axis of its batched inputs renamed to a probe symbol, shapes inferred."""
    probe = copy_model(model)
    del probe.graph.value_info[:]
    inputs = [i for i in probe.graph.input if i.name not in initializers]
    first = _dims(inputs[0])[0]
    reference = onnx.TensorShapeProto.Dimension()
    reference.CopyFrom(first)
    for info in inputs:
        if _dims(info) and _same(_dims(info)[0], reference):
            _set_dim(_dims(info)[0], _PROBE)
    for output in probe.graph.output:
        if _dims(output):
            _dims(output)[0].Clear()  # let inference say whether the batch reaches it
    return infer_shapes(probe)


def _check_batch_flows(probe: onnx.ModelProto, batch: int | None) -> None:
    """ModelError when a Reshape or Flatten turns the batch axis into a fixed number other than `batch`."""
    known = {info.name: info for info in [*probe.graph.value_info, *probe.graph.output]}
    made_by = producers(probe.graph)
    for name, info in known.items():
        node = made_by.get(name)
        if node is None or node.op_type not in ("Reshape", "Flatten") or not node.input:
            continue
        source = known.get(node.input[0]) or next((i for i in probe.graph.input if i.name == node.input[0]), None)
        if source is None or not _dims(source) or not _dims(info):
            continue
        batch_in = _dims(source)[0].dim_param == _PROBE
        out = _dims(info)[0]
        if batch_in and out.HasField("dim_value") and out.dim_value != batch:
            raise ModelError(
                f"batch size: the graph cannot take another batch size: {node.op_type} '{node.name or name}' "
                f"turns the batch axis into a fixed {out.dim_value} (expected a Reshape that keeps axis 0, "
                "e.g. shape [0, -1] or [-1, ...]); re-export the model with a dynamic batch"
            )


def _is_batched(output: onnx.ValueInfoProto, probe: onnx.ModelProto, batch: onnx.TensorShapeProto.Dimension) -> bool:
    """Inference says whether the batch reaches this output; when it cannot tell, a declared axis 0
    equal to the input's batch says so."""
    if not _dims(output):
        return False
    inferred = next(o for o in probe.graph.output if o.name == output.name)
    axis = _dims(inferred)[0] if _dims(inferred) else None
    if axis is not None and axis.dim_param == _PROBE:
        return True
    if axis is not None and (axis.HasField("dim_value") or axis.HasField("dim_param")):
        return False
    return _same(_dims(output)[0], batch)


def _dims(info: onnx.ValueInfoProto) -> list[onnx.TensorShapeProto.Dimension]:
    tensor_type = info.type.tensor_type
    return list(tensor_type.shape.dim) if tensor_type.HasField("shape") else []


def _same(a: onnx.TensorShapeProto.Dimension, b: onnx.TensorShapeProto.Dimension) -> bool:
    """Equal sizes, equal symbols, or both unknown (an exporter that names nothing)."""
    if not any(d.HasField(f) for d in (a, b) for f in ("dim_value", "dim_param")):
        return True
    if a.HasField("dim_value") and b.HasField("dim_value"):
        return a.dim_value == b.dim_value
    return a.HasField("dim_param") and b.HasField("dim_param") and a.dim_param == b.dim_param


def _set_dim(dim: onnx.TensorShapeProto.Dimension, value: int | str | None) -> None:
    if isinstance(value, int):
        dim.dim_value = value
    else:
        dim.dim_param = value or DYNAMIC_BATCH


def _describe(dim: onnx.TensorShapeProto.Dimension) -> str:
    if dim.HasField("dim_value"):
        return str(dim.dim_value)
    return dim.dim_param or "?"
