"""ONNX graph passes an engine build runs: fold preprocessing, constants and BatchNormalization,
remove no-ops, infer shapes, set the batch axis. `optimize_graph` runs them in order."""

from .batch_size import BatchSize
from .batchnorm_folding import BatchNormFolding
from .constant_folding import ConstantFolding
from .model_pass import GraphPass, PassReport, run_passes
from .noop_removal import NoOpRemoval
from .optimize import optimize_graph
from .options import GRAPH_PASSES_VERSION, GraphOptions
from .shape_inference import ShapeInference

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
