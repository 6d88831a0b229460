"""Where an ONNX model can be split between the edge (the head) and the cloud (the tail).

A cut is a set of main-graph nodes, the head, that holds whatever its nodes read (but the model's
input and constants); the rest is the tail, and what crosses is every tensor the head computes that
the tail (or the model's output) still reads, outer-scope reads of Loop/If/Scan bodies included.
Constants (initializers, and what is computed from them alone, like a `Constant` or a weight's
Transpose) never cross: the tail gets its own copy. A cut never falls inside a Loop or an NMS, since
only the main graph is cut.

Two ways find cuts. `cut_points` takes each prefix of the node order (ONNX keeps nodes topologically
sorted): in a chain one tensor crosses, inside a branched block (a residual connection) several, and
between blocks one again; that is every cut of a chain. A branched model also gets the minimum cuts
of its graph (dag_cuts.py), which need not be prefixes of its node order.

Which cuts are worth a plan is measured, not inferred from shapes (the shipped detector's are
dynamic): `measure_tensors` runs the model once on a sample and records each tensor's bytes. A cut
with more edge work only helps when it sends fewer bytes than every cut with less (a cut with fewer
bytes and less work leaves less on the edge too), so `useful_cuts` keeps that frontier, and never a
cut that sends more than the input itself (sending the frame, `cloud` mode, is then better).
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
    head: frozenset[int]
    """Indices of the main graph's nodes computed on the edge; the tail computes the others it needs."""
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


@dataclass(frozen=True)
class TensorSample:
    shape: tuple[int, ...]
    dtype: str
    bytes: int


def cut_points(model: onnx.ModelProto) -> list[Cut]:
    """Every prefix of the node order whose tail does not read the graph's input (that is `cloud` mode)."""
    graph = model.graph
    constant = constant_tensors(graph)
    inputs = [value.name for value in graph.input if value.name not in constant]
    reads = [node_reads(node) for node in graph.node]
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
        cuts.append(Cut(frozenset(range(position)), tuple(live), _node_label(node, position - 1)))
    return cuts


def head_cut(model: onnx.ModelProto, head: frozenset[int], constant: set[str] | None = None) -> Cut:
    """The cut whose head is these node indices (closed under what they read): what crosses, in the
    order the head produces it."""
    graph = model.graph
    constant = constant_tensors(graph) if constant is None else constant
    read_by_tail = set().union(*(node_reads(node) for index, node in enumerate(graph.node) if index not in head))
    read_by_tail |= {value.name for value in graph.output}
    crossing = [
        out
        for index in sorted(head)
        for out in graph.node[index].output
        if out and out not in constant and out in read_by_tail
    ]
    last = max(head)
    return Cut(head, tuple(dict.fromkeys(crossing)), _node_label(graph.node[last], last))


def producers_of(model: onnx.ModelProto, tensors: Iterable[str]) -> frozenset[int]:
    """Indices of the main-graph nodes that `tensors` are computed from, theirs included."""
    graph = model.graph
    producer = {out: index for index, node in enumerate(graph.node) for out in node.output}
    found: set[int] = set()
    pending = [producer[name] for name in tensors if name in producer]
    while pending:
        index = pending.pop()
        if index not in found:
            found.add(index)
            pending += [producer[name] for name in node_reads(graph.node[index]) if name in producer]
    return frozenset(found)


def measure_tensors(
    model: onnx.ModelProto, feed: Mapping[str, np.ndarray], names: Iterable[str]
) -> dict[str, TensorSample]:
    """The shape, dtype and bytes of each of `names` for one sample `feed`, from one run of the model
    with every one of them exposed as an output (onnxruntime's CPU provider)."""
    import onnxruntime

    wanted = list(dict.fromkeys(names))
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    present = {value.name for value in exposed.graph.output}
    exposed.graph.output.extend(helper.make_empty_tensor_value_info(name) for name in wanted if name not in present)
    session = onnxruntime.InferenceSession(exposed.SerializeToString(), providers=["CPUExecutionProvider"])
    outputs = [value.name for value in session.get_outputs()]
    values = dict(zip(outputs, session.run(outputs, dict(feed)), strict=True))
    samples = {}
    for name in wanted:
        array = np.asarray(values[name])
        samples[name] = TensorSample(tuple(array.shape), array.dtype.name, array.nbytes)
    return samples


def computed_tensors(model: onnx.ModelProto) -> list[str]:
    """Every tensor a main-graph node computes from the input (not from constants alone)."""
    constant = constant_tensors(model.graph)
    return [out for node in model.graph.node for out in node.output if out and out not in constant]


def measure_cuts(
    model: onnx.ModelProto,
    cuts: Sequence[Cut],
    feed: Mapping[str, np.ndarray],
    samples: Mapping[str, TensorSample] | None = None,
) -> list[MeasuredCut]:
    """Each cut's bytes for one sample `feed` (from `samples` when measured already)."""
    if samples is None:
        samples = measure_tensors(model, feed, (name for cut in cuts for name in cut.tensors))
    measured = []
    for cut in cuts:
        each = [samples[name] for name in cut.tensors]
        measured.append(
            MeasuredCut(
                cut,
                sum(sample.bytes for sample in each),
                tuple(sample.shape for sample in each),
                tuple(sample.dtype for sample in each),
            )
        )
    return measured


def useful_cuts(
    measured: Iterable[MeasuredCut], input_bytes: int, node_ms: Sequence[float] | None = None
) -> list[MeasuredCut]:
    """The cuts that send fewer bytes than every cut with less edge work and than the input itself; the
    edge work is the head's nodes' time (`node_ms`), or their count without a profile."""

    def work(cut: MeasuredCut) -> float:
        return sum(node_ms[index] for index in cut.cut.head) if node_ms is not None else len(cut.cut.head)

    kept: list[MeasuredCut] = []
    smallest = input_bytes
    for cut in sorted(measured, key=lambda m: (work(m), m.bytes)):
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
    # A valid head hands the tail every non-constant tensor it reads, so walking back from the outputs
    # to the cut's tensors reaches only tail nodes and the constants the tail recomputes.
    head_nodes = _needed(graph.node, cut.tensors)
    tail_nodes = _needed(graph.node, [value.name for value in graph.output], stop_at=set(cut.tensors))
    crossing = [types[name] for name in cut.tensors]
    head = _model_of(model, head_nodes, list(graph.input), crossing, "head")
    tail = _model_of(model, tail_nodes, crossing, list(graph.output), "tail")
    return head, tail


def constant_tensors(graph: onnx.GraphProto) -> set[str]:
    """Initializers, and what nodes compute from constants alone (a `Constant`, a weight's Transpose):
    the tail recomputes those rather than receive them."""
    constant = {init.name for init in graph.initializer}
    for node in graph.node:
        inputs = [name for name in node.input if name]
        from_constants = bool(inputs) and all(name in constant for name in inputs)
        if node.op_type == "Constant" or (node.op_type not in SUBGRAPH_OPS and from_constants):
            constant.update(node.output)
    return constant


def node_reads(node: onnx.NodeProto) -> set[str]:
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
        used |= node_reads(node) - defined
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
        pending.extend(n for n in node_reads(nodes[index]) if n not in (stop_at or set()))
    return [node for index, node in enumerate(nodes) if index in keep]


def _model_of(
    model: onnx.ModelProto,
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    part: str,
) -> onnx.ModelProto:
    used = set().union(*(node_reads(node) for node in nodes)) if nodes else set()
    initializers = [init for init in model.graph.initializer if init.name in used]
    graph = helper.make_graph(nodes, f"{model.graph.name}_{part}", inputs, outputs, initializers)
    result = helper.make_model(graph, opset_imports=model.opset_import, ir_version=model.ir_version)
    result.metadata_props.extend(model.metadata_props)
    return result


def _known_types(model: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    inferred = onnx.shape_inference.infer_shapes(model)
    graph = inferred.graph
    return {value.name: value for value in (*graph.value_info, *graph.input, *graph.output)}


def _node_label(node: onnx.NodeProto, index: int) -> str:
    return node.name or f"{node.op_type}_{index}"
