"""ONNX graph passes an engine build runs: fold preprocessing, constants and BatchNormalization,
remove no-ops, infer shapes, set the batch axis. `optimize_graph` runs them in order.

Names load on first use: the passes import onnx (about a second), which a start with a cached engine
never needs, while `GraphOptions` (part of every engine's cache key) is read on every start."""

from __future__ import annotations

from typing import TYPE_CHECKING

from edge_sdk.core.lazy_exports import lazy_exports

_EXPORTS = {
    "BatchNormFolding": "edge_sdk.graph.batchnorm_folding",
    "BatchSize": "edge_sdk.graph.batch_size",
    "ConstantFolding": "edge_sdk.graph.constant_folding",
    "GRAPH_PASSES_VERSION": "edge_sdk.graph.options",
    "GraphOptions": "edge_sdk.graph.options",
    "GraphPass": "edge_sdk.graph.model_pass",
    "NoOpRemoval": "edge_sdk.graph.noop_removal",
    "PassReport": "edge_sdk.graph.model_pass",
    "ShapeInference": "edge_sdk.graph.shape_inference",
    "optimize_graph": "edge_sdk.graph.optimize",
    "run_passes": "edge_sdk.graph.model_pass",
}

__all__ = [
    "GRAPH_PASSES_VERSION",
    "BatchNormFolding",
    "BatchSize",
    "ConstantFolding",
    "GraphOptions",
    "GraphPass",
    "NoOpRemoval",
    "PassReport",
    "ShapeInference",
    "optimize_graph",
    "run_passes",
]

if TYPE_CHECKING:
    from .batch_size import BatchSize
    from .batchnorm_folding import BatchNormFolding
    from .constant_folding import ConstantFolding
    from .model_pass import GraphPass, PassReport, run_passes
    from .noop_removal import NoOpRemoval
    from .optimize import optimize_graph
    from .options import GRAPH_PASSES_VERSION, GraphOptions
    from .shape_inference import ShapeInference

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
