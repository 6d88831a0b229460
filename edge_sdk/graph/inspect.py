"""What is inside an ONNX model: inputs, outputs, opset, op counts, weight size."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx

from edge_sdk.core.model_file import ModelFile
from edge_sdk.core.tensor_meta import TensorMeta

from .graph_edit import opset_version, subgraphs


@dataclass(frozen=True)
class ModelSummary:
    name: str
    inputs: tuple[TensorMeta, ...]
    outputs: tuple[TensorMeta, ...]
    opset: int
    ir_version: int
    producer: str
    nodes: int
    """Nodes of the main graph."""
    subgraph_nodes: int
    """Nodes inside Loop/If/Scan bodies (not counted in `nodes`)."""
    op_counts: dict[str, int]
    """Main-graph op type -> count, most frequent first."""
    initializers: int
    initializer_bytes: int

    @classmethod
    def of(cls, model: onnx.ModelProto, name: str) -> ModelSummary:
        graph = model.graph
        initializer_names = {i.name for i in graph.initializer}
        counts = Counter(node.op_type for node in graph.node)
        return cls(
            name=name,
            inputs=tuple(TensorMeta.from_value_info(v) for v in graph.input if v.name not in initializer_names),
            outputs=tuple(TensorMeta.from_value_info(v) for v in graph.output),
            opset=opset_version(model),
            ir_version=model.ir_version,
            producer=" ".join(p for p in (model.producer_name, model.producer_version) if p),
            nodes=len(graph.node),
            subgraph_nodes=sum(_nested_nodes(body) for node in graph.node for body in subgraphs(node)),
            op_counts=dict(sorted(counts.items(), key=lambda item: (-item[1], item[0]))),
            initializers=len(graph.initializer),
            initializer_bytes=sum(_tensor_bytes(t) for t in graph.initializer),
        )

    def to_dict(self) -> dict[str, Any]:
        def tensor(meta: TensorMeta) -> dict[str, Any]:
            return {"name": meta.name, "dtype": meta.dtype.name, "shape": list(meta.shape)}

        return {
            "name": self.name,
            "inputs": [tensor(m) for m in self.inputs],
            "outputs": [tensor(m) for m in self.outputs],
            "opset": self.opset,
            "ir_version": self.ir_version,
            "producer": self.producer,
            "nodes": self.nodes,
            "subgraph_nodes": self.subgraph_nodes,
            "op_counts": self.op_counts,
            "initializers": self.initializers,
            "initializer_bytes": self.initializer_bytes,
        }


def load_model(path: Path) -> onnx.ModelProto:
    """The parsed model; a missing, empty or corrupt file raises ModelError (one line)."""
    ModelFile.load(path)  # the SDK's one place that turns a bad file into a clear ModelError
    return onnx.load(str(path))


def describe_model(path: Path) -> ModelSummary:
    return ModelSummary.of(load_model(path), path.name)


def _nested_nodes(graph: onnx.GraphProto) -> int:
    return sum(1 + sum(_nested_nodes(body) for body in subgraphs(node)) for node in graph.node)


def _tensor_bytes(tensor: onnx.TensorProto) -> int:
    if tensor.HasField("raw_data"):
        return len(tensor.raw_data)
    try:
        return int(onnx.numpy_helper.to_array(tensor).nbytes)
    except Exception:  # external or unusual storage: size unknown
        return 0
