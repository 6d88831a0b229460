"""Where an ONNX model can be split between the edge (the head) and the cloud (the tail).

A cut is a position in the main graph's node order (ONNX keeps nodes topologically sorted): the nodes
before it are the head, the rest the tail, and what crosses is every tensor the head computes (or the
graph input) that the tail still reads, outer-scope reads of Loop/If/Scan bodies included. In a chain
that is one tensor; inside a branched block (a residual connection) it is several, and between blocks
one again. Constants (initializers, and what is computed from them alone, like a `Constant` or a
weight's Transpose) never cross: the tail gets its own copy. A cut
never falls inside a Loop or an NMS, since only the main graph is cut.

Which cuts are worth a plan is measured, not inferred from shapes (the shipped detector's are
dynamic): `measure_cuts` runs the model once on a sample and records each cut's bytes. A later cut
only helps when it sends fewer bytes than every earlier one (an earlier cut with fewer bytes also
leaves less work on the edge), so `useful_cuts` keeps that frontier, and never a cut that sends more
than the input itself (sending the frame, `cloud` mode, is then better).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

SUBGRAPH_OPS = frozenset({"Loop", "If", "Scan"})


@dataclass(frozen=True)
class Cut:
    position: int
    """The head is nodes[:position] of the main graph, the tail the rest."""
    tensors: tuple[str, ...]
    """What crosses, in the order the head produces it."""
    after: str
    """The last head node's name (or op type and index), for people."""


@dataclass(frozen=True)
class MeasuredCut:
    cut: Cut
    bytes: int
    """The crossing tensors' size for the sample, uncompressed."""
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]


def cut_points(model: onnx.ModelProto) -> list[Cut]:
    """Every cut of the main graph whose tail does not read the graph's input (that is `cloud` mode)."""
    graph = model.graph
    constant = _constant_tensors(graph)
    inputs = [value.name for value in graph.input if value.name not in constant]
    reads = [_reads(node) for node in graph.node]
    outputs = {value.name for value in graph.output}
    # the last position that reads each tensor (graph outputs count as read at the end)
    last_read: dict[str, int] = {name: len(graph.node) for name in outputs}
    for index, names in enumerate(reads):
        for name in names:
            last_read[name] = max(last_read.get(name, -1), index)
    cuts = []
    live: dict[str, None] = dict.fromkeys(inputs)  # ordered set of what crosses a cut here
    for position in range(1, len(graph.node)):
        node = graph.node[position - 1]
        live.update(dict.fromkeys(out for out in node.output if out and out not in constant))
        live = {name: None for name in live if last_read.get(name, -1) >= position}
        if not live or any(name in live for name in inputs):
            continue
        cuts.append(Cut(position, tuple(live), node.name or f"{node.op_type}_{position - 1}"))
    return cuts


def measure_cuts(model: onnx.ModelProto, cuts: Sequence[Cut], feed: Mapping[str, np.ndarray]) -> list[MeasuredCut]:
    """Each cut's bytes for one sample `feed`, from one run of the model with every crossing tensor
    exposed as an output (onnxruntime's CPU provider)."""
    import onnxruntime

    wanted = list(dict.fromkeys(name for cut in cuts for name in cut.tensors))
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    present = {value.name for value in exposed.graph.output}
    exposed.graph.output.extend(helper.make_empty_tensor_value_info(name) for name in wanted if name not in present)
    session = onnxruntime.InferenceSession(exposed.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [value.name for value in session.get_outputs()]
    values = dict(zip(names, session.run(names, dict(feed)), strict=True))
    measured = []
    for cut in cuts:
        arrays = [np.asarray(values[name]) for name in cut.tensors]
        measured.append(
            MeasuredCut(
                cut,
                sum(array.nbytes for array in arrays),
                tuple(array.shape for array in arrays),
                tuple(array.dtype.name for array in arrays),
            )
        )
    return measured


def useful_cuts(measured: Iterable[MeasuredCut], input_bytes: int) -> list[MeasuredCut]:
    """The cuts that send fewer bytes than every earlier cut and than the input itself."""
    kept: list[MeasuredCut] = []
    smallest = input_bytes
    for cut in sorted(measured, key=lambda m: m.cut.position):
        if cut.bytes < smallest:
            kept.append(cut)
            smallest = cut.bytes
    return kept


def split_model(model: onnx.ModelProto, measured: MeasuredCut) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """(head, tail): the head computes the cut's tensors from the graph's inputs, the tail the graph's
    outputs from the cut's tensors. Each keeps only the nodes, initializers and constants it needs. The
    crossing tensors are typed from shape inference, else from the measurement (dtype and rank)."""
    cut, graph = measured.cut, model.graph
    types = _known_types(model)
    for name, dtype, shape in zip(cut.tensors, measured.dtypes, measured.shapes, strict=True):
        known = types.get(name)
        if known is None or not known.type.tensor_type.elem_type or not known.type.tensor_type.HasField("shape"):
            elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
            # the rank as measured, every size left open: the sample's sizes need not be every frame's
            dims = [f"{name}_{axis}" for axis in range(len(shape))]
            types[name] = helper.make_tensor_value_info(name, elem, dims)
    head_nodes = _needed(graph.node[: cut.position], cut.tensors)
    tail_outputs = [value.name for value in graph.output]
    constant = _constant_tensors(graph)
    constant_head = [n for n in graph.node[: cut.position] if n.output and all(out in constant for out in n.output)]
    tail_nodes = _needed(
        [*constant_head, *graph.node[cut.position :]],
        tail_outputs,
        stop_at=set(cut.tensors),
    )
    crossing = [types[name] for name in cut.tensors]
    head = _model_of(model, head_nodes, list(graph.input), crossing, "head")
    tail = _model_of(model, tail_nodes, crossing, list(graph.output), "tail")
    return head, tail


def _constant_tensors(graph: onnx.GraphProto) -> set[str]:
    """Initializers, and what nodes compute from constants alone (a `Constant`, a weight's Transpose):
    the tail recomputes those rather than receive them."""
    constant = {init.name for init in graph.initializer}
    for node in graph.node:
        inputs = [name for name in node.input if name]
        from_constants = bool(inputs) and all(name in constant for name in inputs)
        if node.op_type == "Constant" or (node.op_type not in SUBGRAPH_OPS and from_constants):
            constant.update(node.output)
    return constant


def _reads(node: onnx.NodeProto) -> set[str]:
    """What a node reads: its inputs, and the outer-scope names its subgraphs (Loop bodies) use."""
    names = {name for name in node.input if name}
    for attribute in node.attribute:
        for subgraph in (*([attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else []), *attribute.graphs):
            names |= _outer_reads(subgraph)
    return names


def _outer_reads(graph: onnx.GraphProto) -> set[str]:
    defined = {value.name for value in graph.input} | {init.name for init in graph.initializer}
    used: set[str] = set()
    for node in graph.node:
        used |= _reads(node) - defined
        defined |= set(node.output)
    return used - defined


def _needed(
    nodes: Sequence[onnx.NodeProto], outputs: Iterable[str], stop_at: set[str] | None = None
) -> list[onnx.NodeProto]:
    """The nodes among `nodes` that `outputs` depend on, in their order; `stop_at` names are given."""
    producer = {out: index for index, node in enumerate(nodes) for out in node.output}
    keep: set[int] = set()
    pending = [name for name in outputs if name not in (stop_at or set())]
    while pending:
        name = pending.pop()
        index = producer.get(name)
        if index is None or index in keep:
            continue
        keep.add(index)
        pending.extend(n for n in _reads(nodes[index]) if n not in (stop_at or set()))
    return [node for index, node in enumerate(nodes) if index in keep]


def _model_of(
    model: onnx.ModelProto,
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    part: str,
) -> onnx.ModelProto:
    used = set().union(*(_reads(node) for node in nodes)) if nodes else set()
    initializers = [init for init in model.graph.initializer if init.name in used]
    graph = helper.make_graph(nodes, f"{model.graph.name}_{part}", inputs, outputs, initializers)
    result = helper.make_model(graph, opset_imports=model.opset_import, ir_version=model.ir_version)
    result.metadata_props.extend(model.metadata_props)
    return result


def _known_types(model: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    inferred = onnx.shape_inference.infer_shapes(model)
    graph = inferred.graph
    return {value.name: value for value in (*graph.value_info, *graph.input, *graph.output)}
