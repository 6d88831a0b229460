"""The default INT8 recipe: which layers of a model stay in float before any gate or search runs.

For a detector (`task: detection`) two parts stay float by default (Int8Settings.keep_float: auto):

- the tail: every node after the last weighted layer (Conv, Gemm, MatMul) on its way to the outputs,
  which is box decoding, score conversion, concatenation of the heads and NMS. Its tensors are small,
  so float costs little there, while 8 bits move box corners by whole steps of a range that spans
  every anchor;
- the stem: the first STEM_CONVS convolutions (on MobileNetV2: its first convolution and first two
  bottlenecks, everything at half the input's resolution and the first step down to a quarter).
  They run at high resolution on few channels, where one activation scale per tensor loses the
  most: the sensitivity tool ranks the first two above every other layer of the shipped
  SSDLite-MobileNetV2. On its demo video, in float they take the INT8 engine from 231 to 242 of
  FP32's 244 boxes over all 300 frames (three convolutions: 238), and on both held-out splits the
  gate uses (raw frames, and the demo pipeline's folded 300x300 ones) to every box (docs/int8.md
  has the figures). They are 15% of its convolutions' multiply-adds.

Classifiers and generic models keep the plain recipe (every quantisable layer in 8 bits).
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx

    from ..calibration.settings import Int8Settings, TaskSpec

WEIGHTED_OPS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul"})
STEM_CONVS = 6


def default_float_nodes(model: onnx.ModelProto, settings: Int8Settings, task: TaskSpec) -> list[str]:
    """Names of the nodes the recipe keeps in float, in graph order (empty unless a detector and auto)."""
    if settings.keep_float != "auto" or task.kind != "detection":
        return []
    keep = set(tail_nodes(model)) | set(stem_nodes(model))
    return [node.name for node in model.graph.node if node.name in keep]


def tail_nodes(model: onnx.ModelProto) -> list[str]:
    """Nodes with no weighted layer after them (the graph is in topological order, as ONNX requires)."""
    consumers: dict[str, list[str]] = defaultdict(list)
    for node in model.graph.node:
        for name in node.input:
            consumers[name].append(node.name)
    feeds_weights: set[str] = set()
    for node in reversed(model.graph.node):
        if node.op_type in WEIGHTED_OPS or any(
            reader in feeds_weights for output in node.output for reader in consumers[output]
        ):
            feeds_weights.add(node.name)
    if not feeds_weights:  # no weighted layer at all: nothing is a tail of one
        return []
    return [node.name for node in model.graph.node if node.name not in feeds_weights]


def stem_nodes(model: onnx.ModelProto) -> list[str]:
    """The first STEM_CONVS convolutions in graph order."""
    return [node.name for node in model.graph.node if node.op_type == "Conv"][:STEM_CONVS]
