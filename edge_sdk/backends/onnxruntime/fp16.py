"""fp16 for providers without an fp16 switch: the graph itself converted to float16 before the build.

TensorRT (trt_fp16_enable), CANN (precision_mode force_fp16) and OpenVINO (precision FP16) take fp16
as a provider option; the CUDA provider has none and computes whatever types the graph has, so an
fp16 build whose first provider is CUDA gets its graph converted with ONNX Runtime's own tool
(onnxruntime.transformers.float16). Inputs and outputs keep their types (the pipeline feeds uint8
frames or float32); the equivalence gate compares the result with the FP32 model on the CPU.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import onnx
from onnx import TensorProto, helper

from edge_sdk.graph.graph_edit import copy_model, keep_ir_version, subgraphs, unique_name

TOOL = "onnxruntime.transformers.float16"

CONTROL_FLOW = ("Loop", "If", "Scan")
"""Kept float32 with their bodies: the tool does not convert the body of a node it blocks, and a
converted body (TF's NMS loops) mixes types with the tensors it carries."""

UNSAFE_OPS = ("NonMaxSuppression", "TopK", "RoiAlign", "Range", "CumSum", "Min", "Max", "Upsample")
"""Post-processing and index arithmetic: box coordinates and scores in fp16 reorder ties and shift
boxes, Range/CumSum lose integers past 2048, and the CUDA provider has no fp16 kernel for some."""

PREPROCESS_PREFIX = "edge_sdk.preprocess/"
"""Nodes of the folded preprocessing (graph/preprocess_folding.py): kept float32, so resize and
normalisation stay as exact as the fp32 engine's."""


def op_block_list() -> list[str]:
    """ONNX Runtime's own default block list (ML ops, NMS, TopK, ...) plus ours."""
    from onnxruntime.transformers.float16 import DEFAULT_OP_BLOCK_LIST

    return sorted({*DEFAULT_OP_BLOCK_LIST, *CONTROL_FLOW, *UNSAFE_OPS})


def convert_to_fp16(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, Any]]:
    """`model` with its float32 compute in float16 (IO types and IR version kept), and what was done."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    blocked_ops = set(op_block_list())
    preprocess = [n.name for n in model.graph.node if n.name.startswith(PREPROCESS_PREFIX)]
    # An input that is also an output (a split's tail passes a cut tensor through) makes the tool
    # define that name twice; such outputs are left out of the conversion and put back as they were.
    inputs = {i.name for i in model.graph.input}
    passed = [(n, o) for n, o in enumerate(model.graph.output) if o.name in inputs]
    source = copy_model(model)
    for _n, output in reversed(passed):
        source.graph.output.remove(next(o for o in source.graph.output if o.name == output.name))
    half = convert_float_to_float16(
        source, keep_io_types=True, op_block_list=sorted(blocked_ops), node_block_list=preprocess
    )
    for n, output in passed:
        half.graph.output.insert(n, output)
    _float_outer_reads(half, blocked_ops)
    _drop_round_trips(half)
    keep_ir_version(model, half)
    blocked = Counter(
        n.op_type for n in model.graph.node if n.op_type in blocked_ops and not n.name.startswith(PREPROCESS_PREFIX)
    )
    facts = {
        "tool": TOOL,
        "converted_nodes": _converted_nodes(half),
        "blocked": dict(sorted(blocked.items())),
        "blocked_preprocess_nodes": len(preprocess),
        "keep_io_types": True,
    }
    return half, facts


def _types(graph: onnx.GraphProto) -> dict[str, int]:
    types = {i.name: i.data_type for i in graph.initializer}
    for info in (*graph.input, *graph.output, *graph.value_info):
        types[info.name] = info.type.tensor_type.elem_type
    return types


def _is_inserted_cast(node: onnx.NodeProto) -> bool:
    name = node.name
    return node.op_type == "Cast" and (
        name.startswith(("graph_input_cast", "graph_output_cast"))
        or name.endswith(("_cast_to_fp32_node", "_cast_to_fp16_node"))
    )


def _converted_nodes(model: onnx.ModelProto) -> int:
    """Main-graph nodes of the model (not the tool's Casts) that now produce float16."""
    types = _types(model.graph)
    return sum(
        1
        for n in model.graph.node
        if not _is_inserted_cast(n) and any(types.get(out) == TensorProto.FLOAT16 for out in n.output)
    )


def _float_outer_reads(model: onnx.ModelProto, blocked_ops: set[str]) -> None:
    """Bodies of blocked (float32) control-flow nodes that read a main-graph tensor the tool made float16
    read a float32 Cast of it instead (the tool rewires only a node's explicit inputs)."""
    graph = model.graph
    types = _types(graph)
    casts: dict[str, str] = {}
    added: list[onnx.NodeProto] = []
    for node in graph.node:
        if node.op_type not in blocked_ops:
            continue
        for body in subgraphs(node):
            for name in sorted(_outer_reads(body)):
                if types.get(name) != TensorProto.FLOAT16:
                    continue
                if name not in casts:
                    casts[name] = unique_name(graph, f"{name}_fp32_for_body")
                    added.append(
                        helper.make_node(
                            "Cast", [name], [casts[name]], to=TensorProto.FLOAT, name=f"{casts[name]}_node"
                        )
                    )
                _rename_body_reads(body, name, casts[name])
    graph.node.extend(added)


def _drop_round_trips(model: onnx.ModelProto) -> None:
    """A float32 tensor cast to float16 and straight back (between two blocked nodes: the folded
    preprocessing) is read as the float32 original, so it is not rounded to fp16 on the way."""
    graph = model.graph
    made = {out: n for n in graph.node for out in n.output}
    rewired: dict[str, str] = {}
    for node in graph.node:
        if node.op_type != "Cast" or helper.get_attribute_value(node.attribute[0]) != TensorProto.FLOAT:
            continue
        back = made.get(node.input[0])
        if back is not None and back.op_type == "Cast" and back.name.endswith("_cast_to_fp16_node"):
            rewired[node.output[0]] = back.input[0]
    if not rewired:
        return
    outputs = {o.name for o in graph.output}
    for node in graph.node:
        node.input[:] = [rewired.get(name, name) for name in node.input]
        for body in subgraphs(node):
            for old, new in rewired.items():
                _rename_body_reads(body, old, new)
    while True:
        read = {name for n in graph.node for name in n.input} | outputs
        read |= {name for n in graph.node for body in subgraphs(n) for name in _outer_reads(body)}
        unused = [n for n in graph.node if n.op_type == "Cast" and not set(n.output) & read]
        if not unused:
            return
        for n in unused:
            graph.node.remove(n)


def _outer_reads(body: onnx.GraphProto) -> set[str]:
    local = {i.name for i in body.input} | {i.name for i in body.initializer}
    reads: set[str] = set()
    for inner in body.node:
        local |= set(inner.output)
    for inner in body.node:
        reads |= {name for name in inner.input if name and name not in local}
        for nested in subgraphs(inner):
            reads |= _outer_reads(nested) - local
    return reads


def _rename_body_reads(body: onnx.GraphProto, old: str, new: str) -> None:
    for inner in body.node:
        inner.input[:] = [new if name == old else name for name in inner.input]
        for nested in subgraphs(inner):
            _rename_body_reads(nested, old, new)
