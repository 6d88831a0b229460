"""Small edits on an ONNX main graph that every pass needs: find constants, reroute a tensor, prune.

Subgraphs (Loop, If, Scan bodies) may read main-graph tensors by name, so renames reach into them
and a tensor they read is never pruned.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import onnx
from onnx import helper, numpy_helper


def copy_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """A deep copy, so a pass never changes the model it was given."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


def keep_ir_version(source: onnx.ModelProto, result: onnx.ModelProto) -> onnx.ModelProto:
    """`result` (changed in place) with an IR version no newer than `source`'s, unless its opsets need a newer one.

    onnx stamps the newest IR it knows on a model it builds (14 from onnx 1.23), which an older ONNX
    Runtime refuses (onnxruntime-gpu 1.31 reads up to 13), and ONNX Runtime tells no highest IR it reads:
    the runtime that read the source reads a result at the source's IR.
    """
    ceiling = max(source.ir_version, helper.find_min_ir_version_for(list(result.opset_import), ignore_unknown=True))
    if result.ir_version > ceiling:
        result.ir_version = ceiling
    return result


def node_count(model: onnx.ModelProto) -> int:
    """Nodes of the main graph (the figure ONNX Runtime and the engine builders report)."""
    return len(model.graph.node)


def opset_version(model: onnx.ModelProto) -> int:
    return max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)


def subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    for attribute in node.attribute:
        if attribute.type == onnx.AttributeProto.GRAPH:
            yield attribute.g
        elif attribute.type == onnx.AttributeProto.GRAPHS:
            yield from attribute.graphs


def subgraph_reads(graph: onnx.GraphProto) -> set[str]:
    """Names that nodes inside subgraphs of `graph` read from an enclosing scope."""
    reads: set[str] = set()
    for node in graph.node:
        for body in subgraphs(node):
            local = {i.name for i in body.input} | {i.name for i in body.initializer}
            local |= {out for inner in body.node for out in inner.output}
            reads |= {name for inner in body.node for name in inner.input if name and name not in local}
            reads |= subgraph_reads(body) - local
    return reads


def consumers(graph: onnx.GraphProto) -> dict[str, list[onnx.NodeProto]]:
    """Tensor name -> main-graph nodes that read it."""
    found: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            if name:
                found.setdefault(name, []).append(node)
    return found


def producers(graph: onnx.GraphProto) -> dict[str, onnx.NodeProto]:
    return {out: node for node in graph.node for out in node.output if out}


def constant_values(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    """Initializers and outputs of `Constant` nodes that hold a plain tensor, by name."""
    graph_inputs = {i.name for i in graph.input}
    values = {i.name: numpy_helper.to_array(i) for i in graph.initializer if i.name not in graph_inputs}
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and node.output[0]:
            value = _constant_node_value(node)
            if value is not None:
                values[node.output[0]] = value
    return values


def _constant_node_value(node: onnx.NodeProto) -> np.ndarray | None:
    attribute = node.attribute[0] if len(node.attribute) == 1 else None
    if attribute is None:
        return None
    if attribute.name == "value":
        return numpy_helper.to_array(attribute.t)
    scalars = {"value_float": np.float32, "value_int": np.int64}
    lists = {"value_floats": np.float32, "value_ints": np.int64}
    value = onnx.helper.get_attribute_value(attribute)
    if attribute.name in scalars:
        return np.array(value, dtype=scalars[attribute.name])
    if attribute.name in lists:
        return np.array(value, dtype=lists[attribute.name])
    return None


def rename_tensor(graph: onnx.GraphProto, old: str, new: str) -> None:
    """Every reference to `old` (node inputs and outputs, graph outputs, subgraph reads) becomes `new`."""
    for node in graph.node:
        node.input[:] = [new if name == old else name for name in node.input]
        node.output[:] = [new if name == old else name for name in node.output]
        for body in subgraphs(node):
            _rename_reads(body, old, new)
    for output in graph.output:
        if output.name == old:
            output.name = new
    for info in graph.value_info:
        if info.name == old:
            info.name = new


def _rename_reads(graph: onnx.GraphProto, old: str, new: str) -> None:
    for node in graph.node:
        node.input[:] = [new if name == old else name for name in node.input]
        for body in subgraphs(node):
            _rename_reads(body, old, new)


def bypass(graph: onnx.GraphProto, node: onnx.NodeProto, kept_input: str) -> bool:
    """Remove `node`, whose first output equals its input `kept_input`; readers then read that input.

    A graph output keeps its name: the producer of `kept_input` is renamed to write it directly.
    Returns False (graph unchanged) when that cannot be done, e.g. the input is itself a graph input.
    """
    removed = node.output[0]
    outputs = {o.name for o in graph.output}
    if removed in outputs:
        producer = producers(graph).get(kept_input)
        inputs = {i.name for i in graph.input}
        if producer is None or kept_input in outputs or kept_input in inputs:
            return False
        graph.node.remove(node)
        drop_value_info(graph, removed)
        rename_tensor(graph, kept_input, removed)
        return True
    graph.node.remove(node)
    drop_value_info(graph, removed)
    rename_tensor(graph, removed, kept_input)
    return True


def drop_value_info(graph: onnx.GraphProto, name: str) -> None:
    """Forget the recorded type and shape of `name` (before it is renamed or goes away)."""
    for info in list(graph.value_info):
        if info.name == name:
            graph.value_info.remove(info)


def prune(graph: onnx.GraphProto) -> None:
    """Drop nodes whose outputs nobody reads, then initializers nobody reads (graph outputs and
    subgraph reads count as readers)."""
    while True:
        needed = {o.name for o in graph.output} | subgraph_reads(graph)
        needed |= {name for node in graph.node for name in node.input}
        dead = [node for node in graph.node if not any(out in needed for out in node.output if out)]
        if not dead:
            break
        for node in dead:
            graph.node.remove(node)
    needed = {o.name for o in graph.output} | subgraph_reads(graph)
    needed |= {name for node in graph.node for name in node.input}
    unused = [init for init in graph.initializer if init.name not in needed]
    for init in unused:
        graph.initializer.remove(init)
    known = needed | {out for node in graph.node for out in node.output}
    for info in [v for v in graph.value_info if v.name not in known]:
        graph.value_info.remove(info)


def unique_name(graph: onnx.GraphProto, base: str) -> str:
    taken = {i.name for i in graph.initializer} | {out for node in graph.node for out in node.output}
    taken |= {i.name for i in graph.input}
    name, n = base, 1
    while name in taken:
        name, n = f"{base}_{n}", n + 1
    return name
